package mountinfo

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestPoints(t *testing.T) {
	dir := t.TempDir()
	table := filepath.Join(dir, "mountinfo")
	os.WriteFile(table, []byte(`22 1 0:21 / / rw,relatime - ext4 /dev/vda rw
35 22 0:31 / /var/lib/kiln-state rw - ext4 /dev/vda1 rw
36 22 0:31 /lib/containerd /var/lib/containerd rw - ext4 /dev/vda1 rw
37 22 0:32 / /mnt/a\040b\134c rw - tmpfs tmpfs rw
short line
`), 0o644)
	for _, tc := range []struct {
		name, path string
		want       []string
	}{
		{"every mount point, escapes undone", table, []string{"/", "/var/lib/kiln-state", "/var/lib/containerd", `/mnt/a b\c`}},
		{"no table: no mounts", filepath.Join(dir, "none"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Points(tc.path)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("Points = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
