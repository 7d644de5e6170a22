package upgrade

import "k8s.io/apimachinery/pkg/util/version"

// sameRelease reports whether a and b name one release ("v3.6.5" and
// "3.6.5" do); an unparsable one is the same only as itself.
func sameRelease(a, b string) bool {
	va, errA := version.ParseGeneric(a)
	vb, errB := version.ParseGeneric(b)
	if errA != nil || errB != nil {
		return a == b
	}
	return va.EqualTo(vb)
}
