package state

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/firstboot/machine"
)

type fixedMachine machine.ID

func (f fixedMachine) Identity() (machine.ID, error) { return machine.ID(f), nil }

// watchedMachine is a machine whose identity, asked for when a state
// filesystem's record is checked, is noted among the commands run.
type watchedMachine struct {
	fixedMachine
	r *scriptedRunner
}

func (w watchedMachine) Identity() (machine.ID, error) {
	w.r.cmds = append(w.r.cmds, "(ownership check)")
	return w.fixedMachine.Identity()
}

func TestMountClaimsTheStateForOneMachine(t *testing.T) {
	me := fixedMachine{MACs: []string{"52:54:00:12:34:56"}}
	tests := []struct {
		name    string
		this    fixedMachine
		record  string // "" for none
		adopt   bool   // kiln.state.adopt=1
		created bool   // MountCreated: the filesystem Create just made
		want    Ownership
		wantErr string // a *ForeignError's text
	}{
		{"its own", me, `{"version":1,"macs":["52:54:00:12:34:56"]}`, false, false, Owned, ""},
		{"none: not taken unless adopted", me, "", false, false, 0, "has no kiln-machine.json: nothing says it is this machine's"},
		{"none, adopted", me, "", true, false, Adopted, ""},
		{"none, just created", me, "", false, true, Adopted, ""},
		{"another machine's", me, `{"version":1,"macs":["52:54:00:00:00:09"]}`, false, false, 0, "made by the machine with NICs 52:54:00:00:00:09; this one has NICs 52:54:00:12:34:56"},
		{"another machine's: adoption does not override a record", me, `{"version":1,"macs":["52:54:00:00:00:09"]}`, true, false, 0, "made by the machine with NICs 52:54:00:00:00:09"},
		{"a machine with nothing to record", fixedMachine{}, "", true, false, 0, "no product UUID and no NIC"},
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
			m := &Manager{Root: root, Sys: r, Machine: tc.this, Adopt: tc.adopt}
			var own Ownership
			var err error
			if tc.created {
				own, err = Adopted, m.MountCreated(context.Background(), "/dev/vdb1")
			} else {
				own, err = m.Mount(context.Background(), "/dev/vdb1")
			}
			if tc.wantErr != "" {
				var f *ForeignError
				if !errors.As(err, &f) || f.Dev != "/dev/vdb1" || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Mount = %v, want a *ForeignError on /dev/vdb1 saying %q", err, tc.wantErr)
				}
				if len(r.ran("mount --bind", "mount -o remount")) != 0 || len(r.ran("umount "+filepath.Join(root, MountPoint))) != 1 {
					t.Errorf("commands %q: want no bind, no remount and one umount", r.cmds)
				}
				if b, err := os.ReadFile(rec); string(b) != tc.record || (tc.record == "" && !os.IsNotExist(err)) {
					t.Errorf("the record of a filesystem left alone is now %q, was %q", b, tc.record)
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

// A state filesystem is mounted nosuid, nodev and noexec while its
// record is checked; only one that is accepted is remounted for use, and
// before anything is bound from it (a bind mount takes its flags from
// its source).
func TestMountLooksAtTheRecordWithNothingRunnable(t *testing.T) {
	me := fixedMachine{MACs: []string{"52:54:00:12:34:56"}}
	tests := []struct {
		name     string
		record   string
		accepted bool
	}{
		{"its own", `{"version":1,"macs":["52:54:00:12:34:56"]}`, true},
		{"another machine's", `{"version":1,"macs":["52:54:00:00:00:09"]}`, false},
		{"no record, not adopted", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			mnt := filepath.Join(root, MountPoint)
			if tc.record != "" {
				write(t, root, filepath.Join(MountPoint, RecordFile), tc.record)
			}
			r := &scriptedRunner{}
			m := &Manager{Root: root, Sys: r, Machine: watchedMachine{me, r}}
			_, err := m.Mount(context.Background(), "/dev/vdb1")
			if (err == nil) != tc.accepted {
				t.Fatalf("Mount = %v; want accepted: %v", err, tc.accepted)
			}
			// each command, in this order, starts with these
			want := []string{"mount -t ext4 -o noatime,nosuid,nodev,noexec /dev/vdb1 " + mnt, "(ownership check)"}
			if tc.accepted {
				want = append(want, "mount -o remount,noatime,suid,dev,exec "+mnt, "mount --bind ")
			} else {
				want = append(want, "umount "+mnt)
			}
			if len(r.cmds) < len(want) || !slices.EqualFunc(r.cmds[:len(want)], want, strings.HasPrefix) {
				t.Fatalf("commands %q; want them to start %q", r.cmds, want)
			}
			if !tc.accepted && len(r.ran("mount -o remount", "mount --bind")) != 0 {
				t.Errorf("commands %q: a filesystem not accepted was remounted or bound", r.cmds)
			}
		})
	}
}
