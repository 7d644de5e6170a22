package builder

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kiln-project/kiln/internal/mountinfo"
)

// A chroot step on the overlay of the cached base, for real: the step's
// /proc, /sys and /dev come and go, and the overlay stays mounted with
// what the step wrote. (It once unmounted everything under the root
// filesystem, the overlay too: dracut's initramfs, written into the
// overlay, was gone when the build read it back, whenever the
// initramfs had to be rebuilt on a warm cache.)
func TestChrootMountsLeaveTheOverlayUnderThem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root (make image runs as root)")
	}
	work := t.TempDir()
	lower, rootfs := filepath.Join(work, "lower"), filepath.Join(work, "rootfs")
	for _, d := range []string{lower, rootfs, filepath.Join(work, "upper"), filepath.Join(work, "ow")} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(filepath.Join(lower, "base"), []byte("base\n"), 0o644)
	if err := mountOverlay(lower, rootfs, filepath.Join(work, "upper"), filepath.Join(work, "ow")); err != nil {
		t.Skipf("no overlay here: %v", err)
	}
	t.Cleanup(func() { mountinfo.UnmountUnder(work) })

	err := withChrootMounts(rootfs, nil, func() error {
		if _, err := os.Stat(filepath.Join(rootfs, "proc/self")); err != nil {
			t.Errorf("no /proc inside the step: %v", err)
		}
		// what dracut does in its chroot
		return exec.CommandContext(context.Background(), "sh", "-c", "echo initrd > "+filepath.Join(rootfs, "boot-initrd")).Run()
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(rootfs, "boot-initrd")); err != nil || string(got) != "initrd\n" {
		t.Fatalf("after the step the root filesystem has %q, %v; want what the step wrote", got, err)
	}
	if _, err := os.Stat(filepath.Join(rootfs, "base")); err != nil {
		t.Errorf("the overlay's lower layer is gone after the step: %v", err)
	}
	points, err := mountinfo.Points(mountinfo.Self)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range points {
		switch p {
		case filepath.Join(rootfs, "proc"), filepath.Join(rootfs, "sys"), filepath.Join(rootfs, "dev"), filepath.Join(rootfs, "dev/pts"):
			t.Errorf("%s is still mounted after the step", p)
		}
	}
}
