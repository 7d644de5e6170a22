package vm

import (
	"os"
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
