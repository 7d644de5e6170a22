package state

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/internal/mountinfo"
)

// A state filesystem of a layout this kiln knows is used; one of a newer
// layout, or whose layout record does not parse, is refused with both
// versions named, unmounted, and left byte for byte as it was: the
// machine record is not written even where adoption would write it.
func TestMountRefusesALayoutItDoesNotKnow(t *testing.T) {
	me := fixedMachine{MACs: []string{"52:54:00:12:34:56"}}
	own := `{"version":1,"macs":["52:54:00:12:34:56"]}`
	tests := []struct {
		name    string
		record  string // the machine record; "" for none (adopted)
		layout  string // LayoutFile; "" for none
		wantErr []string
	}{
		{"unversioned (an older kiln's)", own, "", nil},
		{"this kiln's", own, `{"layout":2,"writtenBy":"v1.0.0"}`, nil},
		{"newer", own, `{"layout":3,"writtenBy":"v9.0.0"}`,
			[]string{"on /dev/vdb1 has state layout 3, written by kiln v9.0.0", "this kiln (v1.0.0) knows layouts up to 2", "unmounted and unchanged", "boot an image of kiln v9.0.0 or newer"}},
		{"newer, by a kiln that did not say", own, `{"layout":7}`,
			[]string{"has state layout 7;", "boot an image of a newer kiln"}},
		{"newer, not adopted", "", `{"layout":3,"writtenBy":"v9.0.0"}`, []string{"has state layout 3"}},
		{"unreadable", own, `{"layout":`, []string{"has a kiln-layout.json that does not parse", "(v1.0.0)"}},
		{"nonsense", own, `{"layout":0}`, []string{"does not parse (layout 0)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.record != "" {
				write(t, root, filepath.Join(MountPoint, RecordFile), tc.record)
			}
			if tc.layout != "" {
				write(t, root, filepath.Join(MountPoint, LayoutFile), tc.layout)
			}
			before := tree(t, filepath.Join(root, MountPoint))
			r := &scriptedRunner{}
			m := &Manager{Root: root, Sys: r, Machine: me, Adopt: true, Version: "v1.0.0"}
			_, err := m.Mount(context.Background(), "/dev/vdb1")
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Mount = %v", err)
				}
				return
			}
			var le *LayoutError
			if !errors.As(err, &le) {
				t.Fatalf("Mount = %v, want a *LayoutError", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if len(r.ran("mount --bind", "mount -o remount")) != 0 || len(r.ran("umount")) != 1 {
				t.Errorf("commands %q: want no bind, no remount and one umount", r.cmds)
			}
			if after := tree(t, filepath.Join(root, MountPoint)); after != before {
				t.Errorf("the refused filesystem changed:\n%s\nwas:\n%s", after, before)
			}
		})
	}
}

func TestMountCreatedRecordsThisKilnsLayout(t *testing.T) {
	root := t.TempDir()
	m := &Manager{Root: root, Sys: &scriptedRunner{}, Machine: fixedMachine{MACs: []string{"52:54:00:12:34:56"}}, Version: "v1.0.0"}
	if err := m.MountCreated(context.Background(), "/dev/vda4"); err != nil {
		t.Fatal(err)
	}
	if got := readLayoutFile(t, root); got.Layout != Layout || got.WrittenBy != "v1.0.0" {
		t.Errorf("new filesystem's layout record = %+v, want layout %d by v1.0.0", got, Layout)
	}
}

// Migrate moves an unversioned layout forward once, records who did it,
// and is a no-op after; without a mounted state filesystem, or on a
// layout it does not know, it writes nothing.
func TestMigrateMovesTheLayoutForward(t *testing.T) {
	tests := []struct {
		name     string
		mounted  bool
		layout   string
		wantFrom int
		want     string // LayoutFile afterwards; "" for none
		wantErr  string
	}{
		{"unversioned", true, "", 1, `{"layout":2,"writtenBy":"v1.1.0"}`, ""},
		{"current", true, `{"layout":2,"writtenBy":"v1.0.0"}`, 2, `{"layout":2,"writtenBy":"v1.0.0"}`, ""},
		{"state in RAM", false, "", Layout, "", ""},
		{"newer", true, `{"layout":3,"writtenBy":"v9"}`, 3, `{"layout":3,"writtenBy":"v9"}`, "state layout 3, written by kiln v9"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			os.MkdirAll(filepath.Join(root, MountPoint), 0o755)
			if tc.mounted {
				write(t, root, mountinfo.Self, "36 25 254:4 / "+MountPoint+" rw,noatime shared:1 - ext4 /dev/vda4 rw\n")
			}
			if tc.layout != "" {
				write(t, root, filepath.Join(MountPoint, LayoutFile), tc.layout)
			}
			m := &Manager{Root: root, Sys: &scriptedRunner{}, Version: "v1.1.0"}
			from, err := m.Migrate()
			if from != tc.wantFrom || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Migrate = %d, %v; want %d, error %q", from, err, tc.wantFrom, tc.wantErr)
			}
			data, err := os.ReadFile(filepath.Join(root, MountPoint, LayoutFile))
			if tc.want == "" {
				if err == nil {
					t.Errorf("Migrate wrote %s: %s", LayoutFile, data)
				}
				return
			}
			var got, want layoutRecord
			json.Unmarshal(data, &got)
			json.Unmarshal([]byte(tc.want), &want)
			if got != want {
				t.Errorf("%s after Migrate = %s, want %s", LayoutFile, data, tc.want)
			}
			if again, err := m.Migrate(); tc.wantErr == "" && (again != Layout || err != nil) {
				t.Errorf("Migrate again = %d, %v; want %d, nil", again, err, Layout)
			}
		})
	}
}

// Each step moves the layout one version: the steps make up Layout.
func TestLayoutIsTheLastStep(t *testing.T) {
	if Layout != unversioned+len(layoutSteps) || Layout < 2 {
		t.Errorf("Layout %d, %d steps from layout %d", Layout, len(layoutSteps), unversioned)
	}
	for i, s := range layoutSteps {
		if s.what == "" || s.apply == nil {
			t.Errorf("step to layout %d says nothing or does nothing: %+v", i+unversioned+1, s)
		}
	}
}

func readLayoutFile(t *testing.T, root string) layoutRecord {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, MountPoint, LayoutFile))
	if err != nil {
		t.Fatal(err)
	}
	var rec layoutRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	return rec
}

// tree lists every file under dir with its content.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			data, _ := os.ReadFile(p)
			b.WriteString(strings.TrimPrefix(p, dir) + ": " + string(data) + "\n")
		}
		return nil
	})
	return b.String()
}

// The refusal on a real ext4 filesystem on a loop device, with the real
// mount: it is looked at, unmounted again, and its files are as they were.
func TestMountLeavesARealFilesystemOfANewerLayoutAlone(t *testing.T) {
	disk := loopDisk(t, 64)
	if _, err := exec.LookPath("debugfs"); err != nil {
		t.Skip("debugfs not installed")
	}
	me := fixedMachine{MACs: []string{"52:54:00:12:34:56"}}
	dev, err := (&Manager{Root: "/", Sys: execRunner{}, Machine: me}).Create(context.Background(), Target{Disk: disk})
	if err != nil {
		t.Fatal(err)
	}
	newer := filepath.Join(t.TempDir(), LayoutFile)
	os.WriteFile(newer, []byte(`{"layout":3,"writtenBy":"v9.0.0"}`), 0o644)
	for _, req := range []string{"rm /" + LayoutFile, "write " + newer + " /" + LayoutFile} {
		if out, err := exec.Command("debugfs", "-w", "-R", req, dev).CombinedOutput(); err != nil {
			t.Fatalf("debugfs %s: %v\n%s", req, err, out)
		}
	}
	files := func() string {
		out, _ := exec.Command("debugfs", "-R", "ls -l /", dev).Output()
		lay, _ := exec.Command("debugfs", "-R", "cat /"+LayoutFile, dev).Output()
		return string(out) + string(lay)
	}
	before := files()
	m := &Manager{Root: t.TempDir(), Sys: execRunner{}, Machine: me, Version: "v1.0.0"}
	_, err = m.Mount(context.Background(), dev)
	var le *LayoutError
	if !errors.As(err, &le) || le.Found != 3 {
		t.Fatalf("Mount = %v, want a *LayoutError for layout 3", err)
	}
	if out, _ := exec.Command("findmnt", "-n", "-S", dev).Output(); len(out) != 0 {
		exec.Command("umount", filepath.Join(m.Root, MountPoint)).Run()
		t.Fatalf("%s is still mounted: %s", dev, out)
	}
	if after := files(); after != before {
		t.Errorf("the refused filesystem changed:\n%s\nwas:\n%s", after, before)
	}
}
