package upgradeask

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

var (
	hexA = strings.Repeat("a", 64)
	hexB = strings.Repeat("b", 64)
)

func goodAsk() Ask {
	return Ask{Request: "m2-3f2a9c", KilnSHA256: hexA, Kubernetes: "v1.37.1", URL: "https://10.0.0.1:8443/images/node",
		Artifacts: Artifacts{Kernel: hexA, Initrd: hexB, Rootfs: hexA}, Args: []string{"quiet", "console=ttyS1"}}
}

// An ask survives the round trip, and its artifacts are fetched under
// its URL.
func TestAskRoundTrip(t *testing.T) {
	v, err := goodAsk().Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeAsk(v)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, goodAsk()) {
		t.Errorf("decoded %+v, want %+v", got, goodAsk())
	}
	if u := got.ArtifactURL("rootfs.squashfs"); u != "https://10.0.0.1:8443/images/node/rootfs.squashfs" {
		t.Errorf("ArtifactURL = %s", u)
	}
}

// Encode refuses every malformed ask, naming the field, before it is
// written; Decode refuses the same value.
func TestAskRefusesMalformed(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Ask)
		want string
	}{
		{"no request", func(a *Ask) { a.Request = "" }, `request ""`},
		{"a request with upper case", func(a *Ask) { a.Request = "M2" }, `request "M2"`},
		{"a short kiln digest", func(a *Ask) { a.KilnSHA256 = "0522ca4d" }, `kilnSHA256 "0522ca4d"`},
		{"a release without v", func(a *Ask) { a.Kubernetes = "1.37.1" }, `kubernetes "1.37.1"`},
		{"a tftp URL", func(a *Ask) { a.URL = "tftp://10.0.0.1/pxe" }, "not an http or https URL"},
		{"a URL with a query", func(a *Ask) { a.URL = "http://10.0.0.1/pxe?x=1" }, "no user, query or fragment"},
		{"a URL with a trailing slash", func(a *Ask) { a.URL = "http://10.0.0.1/pxe/" }, "no trailing slash"},
		{"no rootfs digest", func(a *Ask) { a.Artifacts.Rootfs = "" }, "artifacts.rootfs.squashfs"},
		{"an upper-case initrd digest", func(a *Ask) { a.Artifacts.Initrd = strings.ToUpper(hexB) }, "artifacts.initrd.img"},
		{"an argument GRUB would split", func(a *Ask) { a.Args = []string{"quiet", "a b"} }, `args: argument 1: "a b" holds whitespace`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := goodAsk()
			tc.edit(&a)
			_, err := a.Encode()
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), AskAnnotation) {
				t.Errorf("Encode() = %v, want %v naming %q", err, ErrMalformed, tc.want)
			}
		})
	}
}

// Decode refuses what is not an ask: not JSON, unknown or missing
// fields, trailing data.
func TestDecodeAskRefuses(t *testing.T) {
	good, _ := goodAsk().Encode()
	for _, tc := range []struct {
		name, value, want string
	}{
		{"not JSON", "m2-3f2a9c", "invalid character"},
		{"an unknown field", strings.Replace(good, `"request"`, `"slot":"b","request"`, 1), `unknown field "slot"`},
		{"a missing field", strings.Replace(good, `"kubernetes":"v1.37.1",`, "", 1), `kubernetes ""`},
		{"data after it", good + " {}", "data after the JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeAsk(tc.value)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("DecodeAsk() = %v, want %v naming %q", err, ErrMalformed, tc.want)
			}
		})
	}
}

func TestStaged(t *testing.T) {
	for _, tc := range []struct {
		value, want string
	}{
		{"m2-3f2a9c", ""},
		{"", `request ""`},
		{"m2 3f2a9c", `request "m2 3f2a9c"`},
		{strings.Repeat("a", 64), "1 to 63"},
	} {
		got, err := DecodeStaged(tc.value)
		switch {
		case tc.want == "" && (err != nil || got != tc.value):
			t.Errorf("DecodeStaged(%q) = %q, %v", tc.value, got, err)
		case tc.want != "" && (!errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), StagedAnnotation)):
			t.Errorf("DecodeStaged(%q) = %v, want an error naming %q", tc.value, err, tc.want)
		}
	}
}

// A rollback reads as contract/bootslot's console line, survives the
// round trip, and is refused with slots that are not a and b, the same
// slot twice, or a reason a boot-state record cannot hold.
func TestRolledBack(t *testing.T) {
	good := RolledBack{Request: "m2-3f2a9c", From: "b", To: "a", Reason: "health gate: apiserver not ready after 5m0s"}
	if got := good.Error(); got != "kiln: rolled back from b to a: health gate: apiserver not ready after 5m0s" {
		t.Errorf("Error() = %q", got)
	}
	v, err := good.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeRolledBack(v); err != nil || got != good {
		t.Errorf("DecodeRolledBack = %+v, %v; want %+v", got, err, good)
	}
	for _, tc := range []struct {
		name string
		edit func(*RolledBack)
		want string
	}{
		{"slot c", func(r *RolledBack) { r.From = "c" }, `from: slot "c"`},
		{"no to", func(r *RolledBack) { r.To = "" }, `to: slot ""`},
		{"the same slot", func(r *RolledBack) { r.To = "b" }, "both slot b"},
		{"no reason", func(r *RolledBack) { r.Reason = "" }, "reason: empty"},
		{"a two-line reason", func(r *RolledBack) { r.Reason = "a\nb" }, "one trimmed line"},
		{"a long reason", func(r *RolledBack) { r.Reason = strings.Repeat("x", 101) }, "at most 100 bytes"},
		{"a bad request", func(r *RolledBack) { r.Request = "-x" }, `request "-x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := good
			tc.edit(&r)
			if _, err := r.Encode(); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Encode() = %v, want naming %q", err, tc.want)
			}
		})
	}
	if _, err := DecodeRolledBack(`{"request":"m2","from":"b","to":"a"}`); err == nil || !strings.Contains(err.Error(), RolledBackAnnotation) {
		t.Errorf("a rollback without a reason: %v", err)
	}
}

func TestFailed(t *testing.T) {
	good := Failed{Request: "w1-77aa", Reason: "rootfs.squashfs: sha256 cb1b..., the ask says 0522..."}
	v, err := good.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeFailed(v); err != nil || got != good {
		t.Errorf("DecodeFailed = %+v, %v", got, err)
	}
	if _, err := DecodeFailed(`{"request":"w1-77aa","reason":""}`); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), FailedAnnotation) {
		t.Errorf("an empty reason: %v", err)
	}
}
