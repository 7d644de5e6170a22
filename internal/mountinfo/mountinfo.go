// Package mountinfo owns reading the kernel's mount table
// (/proc/self/mountinfo) and detaching what is mounted below a directory:
// the build's chroot and overlay mounts, the containerd a seed is made
// with, and the node agent's state partition all ask it.
package mountinfo

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Self is the calling process's mount table.
const Self = "/proc/self/mountinfo"

// Points lists the mount points of the mount table at path, with
// mountinfo's octal escapes undone. A missing table lists none (a test's
// root has no /proc).
func Points(path string) ([]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 {
			out = append(out, unescape(fields[4]))
		}
	}
	return out, sc.Err()
}

// UnmountUnder detaches every mount at or below dir, deepest first.
func UnmountUnder(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	all, err := Points(Self)
	if err != nil {
		return err
	}
	var under []string
	for _, p := range all {
		if p == abs || strings.HasPrefix(p, abs+"/") {
			under = append(under, p)
		}
	}
	sort.Slice(under, func(i, j int) bool { return len(under[i]) > len(under[j]) })
	for _, p := range under {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting %s: %w", p, err)
		}
	}
	return nil
}

// unescape undoes the octal escapes mountinfo uses for spaces etc.
func unescape(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}
