package builder

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/kiln-project/kiln/internal/mountinfo"
)

// bind is one mount made inside the root filesystem for a chroot command.
type bind struct {
	source, target, fstype string // fstype "" means a bind mount
}

// withChrootMounts mounts /proc, /sys, /dev (and extra binds) into rootfs,
// runs fn, and always unmounts them again, even when fn fails.
func withChrootMounts(rootfs string, extra []bind, fn func() error) (err error) {
	mounts := append([]bind{
		{"proc", "proc", "proc"},
		{"sysfs", "sys", "sysfs"},
		{"/dev", "dev", ""},
		{"/dev/pts", "dev/pts", ""},
	}, extra...)
	defer func() {
		if uerr := mountinfo.UnmountUnder(rootfs); uerr != nil && err == nil {
			err = uerr
		}
	}()
	for _, m := range mounts {
		target := filepath.Join(rootfs, m.target)
		if err := os.MkdirAll(target, 0o755); err != nil {
			return fmt.Errorf("mount point %s: %w", target, err)
		}
		flags, fstype := uintptr(0), m.fstype
		if fstype == "" {
			flags, fstype = unix.MS_BIND, "none"
		}
		if err := unix.Mount(m.source, target, fstype, flags, ""); err != nil {
			return fmt.Errorf("mounting %s on %s: %w", m.source, target, err)
		}
	}
	return fn()
}
