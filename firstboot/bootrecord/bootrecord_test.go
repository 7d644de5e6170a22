package bootrecord

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/internal/retry"
)

var (
	v1 = bootslot.Image{Version: "v1", Digest: "sha256-" + strings.Repeat("1", 64)}
	v2 = bootslot.Image{Version: "v2", Digest: "sha256-" + strings.Repeat("2", 64)}

	activeA = bootslot.Record{Active: bootslot.A, SlotA: v1}
	// trying: GRUB has taken b's one try (Choose) and booted it.
	trying = bootslot.Record{Active: bootslot.A, Staged: bootslot.B, Phase: bootslot.PhaseStaged, Tries: 0, SlotA: v1, SlotB: v2}
)

// store is an ESP directory holding r.
func store(t *testing.T, r bootslot.Record) Store {
	t.Helper()
	s := Store{Dir: t.TempDir()}
	b, err := bootslot.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	p := s.envPath()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

func read(t *testing.T, s Store) bootslot.Record {
	t.Helper()
	r, err := s.Read()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestConclude(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rec     bootslot.Record
		booted  bootslot.Slot
		outcome bootslot.Outcome
		after   string // the record's state once concluded
	}{
		{"a normal boot leaves the record", activeA, bootslot.A, bootslot.Normal, "active a"},
		{"the trying boot leaves the record", trying, bootslot.B, bootslot.Trying, "active a, staged b (tries 0)"},
		{"back on a after an unmarked try: the stage is cleared", trying, bootslot.A, bootslot.RolledBack, "active a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := store(t, tc.rec)
			boot, err := Conclude(s, tc.booted)
			if err != nil {
				t.Fatal(err)
			}
			if boot.Outcome != tc.outcome {
				t.Errorf("outcome %q, want %q", boot.Outcome, tc.outcome)
			}
			got := read(t, s)
			if got.State() != tc.after {
				t.Errorf("record after: %q, want %q", got.State(), tc.after)
			}
			if tc.outcome == bootslot.RolledBack {
				want := "kiln: rolled back from b to a: its trying boot ended before it was marked good"
				if line := boot.Rollback.ConsoleLine(); line != want {
					t.Errorf("console line %q, want %q", line, want)
				}
				if got.LastRollback != boot.Rollback {
					t.Errorf("record keeps rollback %+v, want %+v", got.LastRollback, boot.Rollback)
				}
			}
		})
	}
}

func TestConcludeRefusesABootGRUBDidNotChoose(t *testing.T) {
	s := store(t, activeA)
	if _, err := Conclude(s, bootslot.B); err == nil || !strings.Contains(err.Error(), "neither the active slot nor a staged one") {
		t.Fatalf("got %v", err)
	}
	if got := read(t, s); got.State() != "active a" {
		t.Errorf("record changed to %q", got.State())
	}
}

func TestWriteKeepsTheBlockInPlace(t *testing.T) {
	s := store(t, trying)
	before, err := os.Stat(s.envPath())
	if err != nil {
		t.Fatal(err)
	}
	good, err := bootslot.MarkGood(trying, bootslot.B)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(good); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(s.envPath())
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) || after.Size() != bootslot.BlockSize {
		t.Errorf("the record was replaced or resized: same file %v, %d bytes", os.SameFile(before, after), after.Size())
	}
	if got := read(t, s); got.State() != "active b" {
		t.Errorf("record %q, want active b", got.State())
	}
}

func TestWriteRefusesAFileOfAnotherSize(t *testing.T) {
	s := store(t, activeA)
	if err := os.WriteFile(s.envPath(), []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := s.Write(activeA)
	if err == nil || !strings.Contains(err.Error(), "is 5 bytes, not the 1024 of a GRUB environment block") {
		t.Fatalf("got %v", err)
	}
	if b, _ := os.ReadFile(s.envPath()); string(b) != "short" {
		t.Errorf("the file was changed to %q", b)
	}
}

func TestInstall(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	data := []byte("a kernel")
	sum, err := s.Install(bootslot.B.Kernel(), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)
	if sum != hex.EncodeToString(want[:]) {
		t.Errorf("digest %s", sum)
	}
	got, err := os.ReadFile(filepath.Join(s.Dir, "kiln/b/vmlinuz"))
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("installed %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "kiln/b/vmlinuz.new")); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}
	for _, bad := range []string{"/EFI/BOOT/BOOTX64.EFI", "/kiln/../EFI/x", "kiln/b/vmlinuz"} {
		if _, err := s.Install(bad, bytes.NewReader(data)); err == nil {
			t.Errorf("Install(%q) was not refused", bad)
		}
	}
}

type reboots struct{ n int }

func (r *reboots) reboot(context.Context) error { r.n++; return nil }

func TestTrialDecide(t *testing.T) {
	gateErr := errors.New("apiserver: n1's apiserver is not ready: 503")
	for _, tc := range []struct {
		name    string
		roleErr error
		gate    error
		reboots int
		after   string
		err     string
	}{
		{"passes: b is active", nil, nil, 0, "active b", ""},
		{"the gate never passes: failed, rebooted", nil, gateErr, 1,
			"active a, staged b (tries 0, failed: health gate not passed in 10ms: apiserver: n1's apiserver is not ready: 503)",
			"the trying boot failed: health gate not passed in 10ms: apiserver: "},
		{"a gate that can never pass fails at once", nil, retry.Final(errors.New("test switch: fails on purpose")), 1,
			"active a, staged b (tries 0, failed: health gate: test switch: fails on purpose)", "the trying boot failed: health gate: test switch"},
		{"the role failed: failed without waiting for the gate", errors.New("phase worker/kubelet: kubelet did not start"), nil, 1,
			"active a, staged b (tries 0, failed: role: phase worker/kubelet: kubelet did not start)", "the trying boot failed: role: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := store(t, trying)
			r := &reboots{}
			gates := 0
			tr := Trial{Store: s, Booted: bootslot.B, Bound: 10 * time.Millisecond, Reboot: r.reboot, Log: t.Logf,
				Gate: func(context.Context) error { gates++; return tc.gate }}
			err := tr.Decide(context.Background(), tc.roleErr)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("Decide: %v, want %q", err, tc.err)
			}
			if tc.err != "" && !errors.Is(err, ErrFailed) {
				t.Errorf("%v does not wrap ErrFailed", err)
			}
			if r.n != tc.reboots {
				t.Errorf("%d reboots, want %d", r.n, tc.reboots)
			}
			if tc.roleErr != nil && gates != 0 {
				t.Errorf("the gate was asked %d times after the role failed", gates)
			}
			if got := read(t, s).State(); got != tc.after {
				t.Errorf("record %q, want %q", got, tc.after)
			}
		})
	}
}

func TestTrialDecideThenRollBack(t *testing.T) {
	// The whole path on one record: a failed trying boot of b, then
	// GRUB's next choice, then the agent's conclusion on that boot.
	s := store(t, trying)
	tr := Trial{Store: s, Booted: bootslot.B, Bound: time.Millisecond, Reboot: (&reboots{}).reboot, Log: t.Logf,
		Gate: func(context.Context) error { return errors.New("apiserver not ready") }}
	if err := tr.Decide(context.Background(), nil); !errors.Is(err, ErrFailed) {
		t.Fatalf("Decide: %v", err)
	}
	slot, _ := bootslot.Choose(read(t, s))
	if slot != bootslot.A {
		t.Fatalf("GRUB would boot %s after the failure", slot)
	}
	boot, err := Conclude(s, slot)
	if err != nil {
		t.Fatal(err)
	}
	if line := boot.Rollback.ConsoleLine(); !strings.HasPrefix(line, "kiln: rolled back from b to a: health gate not passed in 1ms: ") || !strings.Contains(line, "apiserver not ready") {
		t.Errorf("console line %q", line)
	}
	if got := read(t, s).State(); got != "active a" {
		t.Errorf("record %q", got)
	}
}

func TestBooted(t *testing.T) {
	for cmdline, want := range map[string]string{
		"root=live:PARTLABEL=KILN-ROOT-B console=ttyS0 kiln.slot=b\n": "b",
		"root=live:CDLABEL=KILN console=ttyS0\n":                      ErrNoSlots.Error(),
	} {
		root := t.TempDir()
		os.MkdirAll(filepath.Join(root, "proc"), 0o755)
		os.WriteFile(filepath.Join(root, "proc/cmdline"), []byte(cmdline), 0o644)
		s, err := Booted(root)
		got := string(s)
		if err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("Booted(%q) = %q, want %q", cmdline, got, want)
		}
	}
}

func TestTrialExpire(t *testing.T) {
	t.Run("an unjudged trying boot fails at the deadline", func(t *testing.T) {
		s := store(t, trying)
		r := &reboots{}
		ups := []time.Duration{time.Minute, 29 * time.Minute, 30 * time.Minute}
		uptime := func() (time.Duration, error) { u := ups[0]; ups = ups[1:]; return u, nil }
		err := Trial{Store: s, Booted: bootslot.B, Reboot: r.reboot, Log: t.Logf}.Expire(context.Background(), 30*time.Minute, uptime, time.Millisecond)
		if !errors.Is(err, ErrFailed) || r.n != 1 {
			t.Fatalf("Expire: %v, %d reboots", err, r.n)
		}
		if got := read(t, s).State(); got != "active a, staged b (tries 0, failed: no verdict within 30m0s of the boot)" {
			t.Errorf("record %q", got)
		}
	})
	t.Run("a boot the agent marked good is left alone", func(t *testing.T) {
		s := store(t, trying)
		r := &reboots{}
		calls := 0
		uptime := func() (time.Duration, error) {
			calls++
			if calls == 2 { // the agent judges the boot meanwhile
				good, _ := bootslot.MarkGood(trying, bootslot.B)
				if err := s.Write(good); err != nil {
					t.Fatal(err)
				}
			}
			return time.Minute, nil
		}
		err := Trial{Store: s, Booted: bootslot.B, Reboot: r.reboot, Log: t.Logf}.Expire(context.Background(), 30*time.Minute, uptime, time.Millisecond)
		if err != nil || r.n != 0 {
			t.Fatalf("Expire: %v, %d reboots", err, r.n)
		}
		if got := read(t, s).State(); got != "active b" {
			t.Errorf("record %q", got)
		}
	})
	t.Run("a normal boot returns at once", func(t *testing.T) {
		s := store(t, activeA)
		err := Trial{Store: s, Booted: bootslot.A, Log: t.Logf}.Expire(context.Background(), time.Hour,
			func() (time.Duration, error) { t.Fatal("uptime asked"); return 0, nil }, time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
	})
}
