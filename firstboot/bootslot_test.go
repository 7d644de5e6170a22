package firstboot

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/firstboot/bootrecord"
)

// slotRoot is a node root booted from slot booted, its ESP mounted
// (as the mount table says) and holding rec.
func slotRoot(t *testing.T, booted string, rec bootslot.Record) (string, bootrecord.Store) {
	t.Helper()
	root := t.TempDir()
	write := func(p string, b []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := "root=live:CDLABEL=KILN console=ttyS0\n"
	if booted != "" {
		cmd = strings.Join(bootslot.Cmdline(bootslot.Slot(booted)), " ") + "\n"
	}
	write("proc/cmdline", []byte(cmd))
	write("proc/uptime", []byte("12.5 20.0\n"))
	write("proc/self/mountinfo", []byte("90 1 0:40 / "+bootrecord.MountPoint+" rw - vfat /dev/vda1 rw\n"))
	b, err := bootslot.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	write(bootrecord.MountPoint+bootslot.EnvPath, b)
	return root, bootrecord.Store{Dir: filepath.Join(root, bootrecord.MountPoint)}
}

var (
	imgV1 = bootslot.Image{Version: "v1", Digest: "sha256-" + strings.Repeat("1", 64)}
	imgV2 = bootslot.Image{Version: "v2", Digest: "sha256-" + strings.Repeat("2", 64)}
)

func TestRunBootSlot(t *testing.T) {
	failedB := bootslot.Record{Active: bootslot.A, Staged: bootslot.B, Phase: bootslot.PhaseStaged, SlotA: imgV1, SlotB: imgV2,
		FailReason: "health gate not passed in 10m0s: ready: not Ready"}
	for _, tc := range []struct {
		name, booted string
		rec          bootslot.Record
		console      string
		after        string
	}{
		{"an ISO boot has nothing to do", "", failedB, "", "active a, staged b (tries 0, failed: health gate not passed in 10m0s: ready: not Ready)"},
		{"the active slot", "a", bootslot.Record{Active: bootslot.A, SlotA: imgV1}, "kiln-firstboot: slot a: booted the active slot\n", "active a"},
		{"back after a failed try: the rollback on the console", "a", failedB,
			"kiln: rolled back from b to a: health gate not passed in 10m0s: ready: not Ready\n", "active a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, store := slotRoot(t, tc.booted, tc.rec)
			var out bytes.Buffer
			if err := RunBootSlot(context.Background(), root, &out, nil, time.Hour); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.console {
				t.Errorf("console %q, want %q", out.String(), tc.console)
			}
			r, err := store.Read()
			if err != nil {
				t.Fatal(err)
			}
			if r.State() != tc.after {
				t.Errorf("record %q, want %q", r.State(), tc.after)
			}
		})
	}
}

func TestRunBootSlotFailsATryingBootPastItsDeadline(t *testing.T) {
	trying := bootslot.Record{Active: bootslot.A, Staged: bootslot.B, Phase: bootslot.PhaseStaged, SlotA: imgV1, SlotB: imgV2}
	root, store := slotRoot(t, "b", trying)
	sys := &fakeSys{}
	var out bytes.Buffer
	err := RunBootSlot(context.Background(), root, &out, sys, 10*time.Second) // uptime says 12.5 s
	if err == nil || !strings.Contains(err.Error(), "no verdict within 10s of the boot") {
		t.Fatalf("RunBootSlot: %v", err)
	}
	if got := strings.Join(sys.cmds, "\n"); got != "systemctl reboot" {
		t.Errorf("ran %q", got)
	}
	r, _ := store.Read()
	if r.FailReason != "no verdict within 10s of the boot" {
		t.Errorf("record %q", r.State())
	}
	if !strings.Contains(out.String(), "kiln: the trying boot of slot b failed (no verdict within 10s of the boot): rebooting onto slot a") {
		t.Errorf("console %q", out.String())
	}
}
