package state

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/firstboot/machine"
)

type fixedMachine machine.ID

func (f fixedMachine) Identity() (machine.ID, error) { return machine.ID(f), nil }

func TestMountClaimsTheStateForOneMachine(t *testing.T) {
	me := fixedMachine{MACs: []string{"52:54:00:12:34:56"}}
	tests := []struct {
		name    string
		this    fixedMachine
		record  string // "" for none
		want    Ownership
		wantErr string // a *ForeignError's text
	}{
		{"its own", me, `{"version":1,"macs":["52:54:00:12:34:56"]}`, Owned, ""},
		{"none yet", me, "", Adopted, ""},
		{"another machine's", me, `{"version":1,"macs":["52:54:00:00:00:09"]}`, 0, "made by the machine with NICs 52:54:00:00:00:09; this one has NICs 52:54:00:12:34:56"},
		{"a machine with nothing to record", fixedMachine{}, "", 0, "no product UUID and no NIC"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			rec := filepath.Join(root, MountPoint, RecordFile)
			os.MkdirAll(filepath.Dir(rec), 0o755)
			if tc.record != "" {
				os.WriteFile(rec, []byte(tc.record), 0o644)
			}
			r := &scriptedRunner{}
			m := &Manager{Root: root, Sys: r, Machine: tc.this}
			own, err := m.Mount(context.Background(), "/dev/vdb1")
			if tc.wantErr != "" {
				var f *ForeignError
				if !errors.As(err, &f) || f.Dev != "/dev/vdb1" || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Mount = %v, want a *ForeignError on /dev/vdb1 saying %q", err, tc.wantErr)
				}
				if len(r.ran("mount --bind")) != 0 || len(r.ran("umount "+filepath.Join(root, MountPoint))) != 1 {
					t.Errorf("commands %q: want no bind and one umount", r.cmds)
				}
				if _, err := os.Stat(rec); tc.record == "" && !os.IsNotExist(err) {
					t.Errorf("a record was written for a machine it cannot describe")
				}
				return
			}
			if err != nil || own != tc.want {
				t.Fatalf("Mount = %v, %v; want %v", own, err, tc.want)
			}
			if len(r.ran("mount --bind")) != len(PersistentDirs) {
				t.Errorf("commands %q: want every persistent path bound", r.cmds)
			}
			if b, _ := os.ReadFile(rec); !strings.Contains(string(b), "52:54:00:12:34:56") {
				t.Errorf("record %s", b)
			}
		})
	}
}
