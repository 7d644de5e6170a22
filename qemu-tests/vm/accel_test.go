package vm

import (
	"os"
	"path/filepath"
	"testing"
)

// The probe runs the real QEMU; it must agree with what a guest would
// see, so it only checks that an override wins and that the probe
// returns without hanging.
func TestKVMProbe(t *testing.T) {
	if os.Getenv("KILN_ACCEL") != "" {
		t.Skip("KILN_ACCEL is set")
	}
	t.Setenv("KILN_ACCEL", "tcg")
	if probeKVM() {
		t.Error("KILN_ACCEL=tcg still chose KVM")
	}
	t.Setenv("KILN_ACCEL", "")
	t.Logf("KVM usable on this host: %v", probeKVM())
}

// The probe boots the image's PXE kernel under KILN_OUT when there is
// one, and only then.
func TestProbeKernel(t *testing.T) {
	out := t.TempDir()
	for _, tc := range []struct {
		name, out string
		kernel    bool
		want      string
	}{
		{"KILN_OUT unset", "", false, ""},
		{"no kernel in the image", out, false, ""},
		{"the image's PXE kernel", out, true, filepath.Join(out, "pxe", "vmlinuz")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.kernel {
				os.MkdirAll(filepath.Join(out, "pxe"), 0o755)
				if err := os.WriteFile(filepath.Join(out, "pxe", "vmlinuz"), []byte("k"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("KILN_OUT", tc.out)
			if got := ProbeKernel(); got != tc.want {
				t.Errorf("ProbeKernel() = %q, want %q", got, tc.want)
			}
		})
	}
}
