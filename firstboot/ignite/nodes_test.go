package ignite

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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

// A directory with overwrite: true replaces what is at its path, as
// Ignition removes it first; without overwrite, a non-directory there
// refuses the config before anything is written.
func TestDirectoryOverwrite(t *testing.T) {
	tests := []struct {
		name     string
		existing func(t *testing.T, full string)
		dir      string // the directory entry's fields besides its path
		wantErr  string // Check's refusal; "" to apply
		wantKept bool   // an existing directory's file is still there
	}{
		{"a file, overwrite", writeFile, `"overwrite":true`, "", false},
		{"a file, no overwrite", writeFile, ``, "/etc/d exists and is not a directory, and overwrite is false", false},
		{"a symbolic link, overwrite", func(t *testing.T, full string) { os.Symlink("/etc", full) }, `"overwrite":true`, "", false},
		{"a directory, no overwrite", dirWithFile, ``, "", true},
		{"a directory, overwrite", dirWithFile, `"overwrite":true`, "", false},
		{"nothing", func(*testing.T, string) {}, `"overwrite":true`, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := newRoot(t)
			full := filepath.Join(root, "etc/d")
			tc.existing(t, full)
			fields := `"path":"/etc/d","mode":488`
			if tc.dir != "" {
				fields += "," + tc.dir
			}
			p, err := plan(t, `{"ignition":{"version":"3.4.0"},"storage":{"directories":[{`+fields+`}]}}`)
			if err != nil {
				t.Fatal(err)
			}
			a := &Applier{Root: root, Persistent: []string{"/var/lib/kiln"}, StampDir: "/var/lib/kiln/stamps", Host: &fakeHost{root: root}}
			if err := a.Check(p); tc.wantErr != "" || err != nil {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Check = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err := a.Apply(context.Background(), p); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Lstat(full)
			if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o750 {
				t.Fatalf("/etc/d: %v, %v; want a directory, mode 0750", fi, err)
			}
			if _, err := os.Stat(filepath.Join(full, "f")); (err == nil) != tc.wantKept {
				t.Fatalf("the existing directory's file: %v, want kept %v", err, tc.wantKept)
			}
		})
	}
}

func writeFile(t *testing.T, full string) {
	if err := os.WriteFile(full, []byte("image file"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func dirWithFile(t *testing.T, full string) {
	if err := os.Mkdir(full, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(full, "f"))
}

// On a persistent path the directory is emptied once, as Ignition's one
// run at provisioning empties it: what the node keeps there afterwards
// survives the re-apply of later boots. Its parent and a config
// directory listed first inside it are made in depth order.
func TestDirectoryOverwriteOnAPersistentPathOnce(t *testing.T) {
	root := newRoot(t)
	const cfg = `{"ignition":{"version":"3.4.0"},"storage":{"directories":[
		{"path":"/var/lib/kiln/data/sub"},{"path":"/var/lib/kiln/data","overwrite":true}]}}`
	data := filepath.Join(root, "var/lib/kiln/data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(data, "before"))
	applyConfig(t, root, cfg)
	if _, err := os.Stat(filepath.Join(data, "before")); !os.IsNotExist(err) {
		t.Fatalf("the first apply kept %s/before: %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(data, "sub")); err != nil {
		t.Fatalf("the directory inside it: %v", err)
	}
	writeFile(t, filepath.Join(data, "after"))
	applyConfig(t, root, cfg)
	if _, err := os.Stat(filepath.Join(data, "after")); err != nil {
		t.Fatalf("the second apply removed what the node wrote: %v", err)
	}
}

// overwrite would recurse into what is mounted below the path: a state
// partition directory is refused before anything is written.
func TestDirectoryOverwriteRefusesAMountPoint(t *testing.T) {
	for _, path := range []string{"/var/lib", "/var/lib/kiln", "/"} {
		p, err := plan(t, `{"ignition":{"version":"3.4.0"},"storage":{"directories":[{"path":"`+path+`","overwrite":true}]}}`)
		if err != nil {
			t.Fatal(err)
		}
		err = (&Applier{Root: newRoot(t), Persistent: []string{"/var/lib/kiln"}}).Check(p)
		want := "directory " + path + ": overwrite would remove /var/lib/kiln, a mount point"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Check = %v, want %q", path, err, want)
		}
	}
}

// A unit whose contents are absent or empty is not written, as in
// Ignition; an empty drop-in is.
func TestUnitWithoutContentsIsNotWritten(t *testing.T) {
	tests := []struct {
		name, unit string
		wantUnit   bool
	}{
		{"no contents", `{"name":"x.service","dropins":[{"name":"a.conf","contents":""}]}`, false},
		{"empty contents", `{"name":"x.service","contents":"","dropins":[{"name":"a.conf","contents":""}]}`, false},
		{"contents", `{"name":"x.service","contents":"[Unit]\n","dropins":[{"name":"a.conf","contents":""}]}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := newRoot(t)
			applyConfig(t, root, `{"ignition":{"version":"3.4.0"},"systemd":{"units":[`+tc.unit+`]}}`)
			_, err := os.Lstat(filepath.Join(root, "etc/systemd/system/x.service"))
			if (err == nil) != tc.wantUnit {
				t.Errorf("unit file: %v, want written %v", err, tc.wantUnit)
			}
			if got := read(t, root, "/etc/systemd/system/x.service.d/a.conf"); got != "" {
				t.Errorf("empty drop-in holds %q", got)
			}
		})
	}
}
