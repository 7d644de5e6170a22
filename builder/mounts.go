package builder

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
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
		if uerr := unmountUnder(rootfs); uerr != nil && err == nil {
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

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	points, err := mountPointsUnder(abs)
	if err != nil {
		return err
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting %s: %w", p, err)
		}
	}
	return nil
}

func mountPointsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	return out, sc.Err()
}

// unescapeMount undoes the octal escapes mountinfo uses for spaces etc.
func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}
