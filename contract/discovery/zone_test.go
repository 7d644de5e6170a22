package discovery

import (
	"net/netip"
	"strings"
	"testing"
)

func TestRenderSortsDedupesAndTypesRecords(t *testing.T) {
	z := Zone{Name: "kube-apiserver.kiln.internal", Serial: 7, APIServers: []netip.Addr{
		netip.MustParseAddr("10.0.0.12"), netip.MustParseAddr("fd00::1"),
		netip.MustParseAddr("10.0.0.11"), netip.MustParseAddr("10.0.0.12"),
	}}
	got := string(z.Render())
	for _, want := range []string{
		"$ORIGIN kube-apiserver.kiln.internal.\n",
		"@\tIN\tSOA\tns.kube-apiserver.kiln.internal. hostmaster.kube-apiserver.kiln.internal. 7 ",
		"ns\tIN\tA\t" + NodeLocalAddress + "\n",
		"@\tIN\tA\t10.0.0.11\n@\tIN\tA\t10.0.0.12\n@\tIN\tAAAA\tfd00::1\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("zone lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "10.0.0.12"); n != 1 {
		t.Errorf("10.0.0.12 listed %d times", n)
	}
	if string(z.Render()) != got {
		t.Error("two renders differ")
	}
}
