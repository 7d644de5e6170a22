package builder

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// bind is one mount made inside the root filesystem for a chroot command.
type bind struct {
	source, target, fstype string // fstype "" means a bind mount
}

// withChrootMounts mounts /proc, /sys, /dev (and extra binds) into rootfs,
// runs fn, and always unmounts them again, even when fn fails. Only its
// own mounts are undone, deepest first: rootfs itself may be a mount (the
// overlay on the cached base), and it must still be there for the steps
// after this one.
func withChrootMounts(rootfs string, extra []bind, fn func() error) (err error) {
	mounts := append([]bind{
		{"proc", "proc", "proc"},
		{"sysfs", "sys", "sysfs"},
		{"/dev", "dev", ""},
		{"/dev/pts", "dev/pts", ""},
	}, extra...)
	var mounted []string
	defer func() {
		for i := len(mounted) - 1; i >= 0; i-- {
			// /dev is bound without MS_REC, so nothing is mounted below
			// a target but what this function mounted there itself
			if uerr := unix.Unmount(mounted[i], unix.MNT_DETACH); uerr != nil && err == nil {
				err = fmt.Errorf("unmounting %s: %w", mounted[i], uerr)
			}
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
		mounted = append(mounted, target)
	}
	return fn()
}
