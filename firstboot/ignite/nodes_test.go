package ignite

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Leading directories of anything the config writes are 0755, as
// Ignition makes them, whatever the directory's own mode and the umask.
func TestLeadingDirectoriesAre0755(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0o077))
	tests := []struct{ name, config, made string }{
		{"directory", `"storage":{"directories":[{"path":"/etc/p/a/b","mode":448}]}`, "/etc/p/a/b"},
		{"file", `"storage":{"files":[{"path":"/etc/p/a/f","mode":384}]}`, "/etc/p/a/f"},
		{"symbolic link", `"storage":{"links":[{"path":"/etc/p/a/l","target":"/x"}]}`, "/etc/p/a/l"},
		{"hard link", `"storage":{"links":[{"path":"/etc/p/a/h","target":"/etc/image-file","hard":true}]}`, "/etc/p/a/h"},
		{"unit drop-in", `"systemd":{"units":[{"name":"x.service","dropins":[{"name":"a.conf","contents":"[Unit]\n"}]}]}`,
			"/etc/systemd/system/x.service.d/a.conf"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := newRoot(t)
			applyConfig(t, root, `{"ignition":{"version":"3.4.0"},`+tc.config+`}`)
			for dir := filepath.Dir(tc.made); dir != "/etc"; dir = filepath.Dir(dir) {
				fi, err := os.Stat(filepath.Join(root, dir))
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != 0o755 {
					t.Errorf("%s: mode %o, want 755", dir, fi.Mode().Perm())
				}
			}
		})
	}
}
