package bootslot

import (
	"fmt"
	"reflect"
	"testing"
)

// node is a disk node as the record's users see it: the record on the
// ESP and the slot the running boot came from.
type node struct {
	r      Record
	booted Slot
}

// powerCycle is a boot after a reboot or a power cut: GRUB chooses and
// saves, then the agent concludes and writes back.
func powerCycle(n node) (node, Boot, error) {
	slot, saved := Choose(n.r)
	boot, after, err := Conclude(saved, slot)
	if err != nil {
		return node{}, Boot{}, fmt.Errorf("GRUB booted %s from %s: %w", slot, n.r.State(), err)
	}
	return node{after, slot}, boot, nil
}

// step is one thing that can happen to a node; a refused transition
// leaves it as it was.
type step struct {
	name string
	do   func(node) (node, error)
}

func record(f func(node) (Record, error)) func(node) (node, error) {
	return func(n node) (node, error) {
		r, err := f(n)
		if err != nil {
			return n, nil
		}
		return node{r, n.booted}, nil
	}
}

var steps = []step{
	{"power cycle", func(n node) (node, error) { n, _, err := powerCycle(n); return n, err }},
	{"stage v2", record(func(n node) (Record, error) { return Stage(n.r, n.booted.Other(), imgV2) })},
	{"stage v3", record(func(n node) (Record, error) { return Stage(n.r, n.booted.Other(), imgV3) })},
	{"root written", record(func(n node) (Record, error) { return StageWritten(n.r, n.r.Staged, n.r.Image(n.r.Staged).Digest) })},
	{"root reads back wrong", record(func(n node) (Record, error) { return StageWritten(n.r, n.r.Staged, imgV1.Digest) })},
	{"mark good", record(func(n node) (Record, error) { return MarkGood(n.r, n.booted) })},
	{"fail", record(func(n node) (Record, error) { return Fail(n.r, n.booted, healthReason) })},
}

// TestEveryReachableStateBootsAGoodSlot walks every state a node can
// reach from a fresh disk through stages, boots, verdicts and power cuts
// between any two writes, and holds each to the contract: GRUB boots a
// slot whose root is whole (the active one, or a staged one read back),
// the agent can make sense of every boot GRUB makes, the record fits its
// block, and two boots with no verdict end on the active slot.
func TestEveryReachableStateBootsAGoodSlot(t *testing.T) {
	start := node{fresh, A}
	seen := map[node]bool{start: true}
	queue := []node{start}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		checkState(t, n)
		for _, s := range steps {
			next, err := s.do(n)
			if err != nil {
				t.Fatalf("%s from %s (booted %s): %v", s.name, n.r.State(), n.booted, err)
			}
			if !seen[next] {
				seen[next] = true
				queue = append(queue, next)
			}
		}
	}
	t.Logf("%d states reached", len(seen))
	if len(seen) < 20 {
		t.Errorf("reached only %d states", len(seen))
	}
}

func checkState(t *testing.T, n node) {
	t.Helper()
	slot, _ := Choose(n.r)
	if slot != n.r.Active && !(slot == n.r.Staged && n.r.Phase == PhaseStaged) {
		t.Errorf("from %s GRUB boots %s, whose root is not known whole", n.r.State(), slot)
	}
	b, err := Encode(n.r)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := Decode(b); err != nil || !reflect.DeepEqual(back, n.r) {
		t.Errorf("%s read back as %+v, %v", n.r.State(), back, err)
	}
	once, _, err := powerCycle(n)
	if err != nil {
		t.Fatal(err)
	}
	twice, _, err := powerCycle(once)
	if err != nil {
		t.Fatal(err)
	}
	if twice.booted != twice.r.Active {
		t.Errorf("from %s two boots with no verdict end on %s, not the active slot (%s)", n.r.State(), twice.booted, twice.r.State())
	}
}

// TestUpgradeStories follows whole upgrades and checks what the agent
// concludes on the last boot.
func TestUpgradeStories(t *testing.T) {
	tests := []struct {
		name    string
		steps   []string
		want    Boot
		wantRec Record
	}{
		{"upgrade marked good", []string{"stage v2", "root written", "power cycle", "mark good", "power cycle"},
			Boot{Outcome: Normal, Slot: B}, activeB},
		{"upgrade failed by its health gate", []string{"stage v2", "root written", "power cycle", "fail", "power cycle"},
			Boot{Outcome: RolledBack, Slot: A, Rollback: Rollback{From: B, To: A, Reason: healthReason}}, rolledOff},
		{"power cut in the trying boot", []string{"stage v2", "root written", "power cycle", "power cycle"},
			Boot{Outcome: RolledBack, Slot: A, Rollback: Rollback{From: B, To: A, Reason: unmarkedReason}},
			Record{Active: A, SlotA: imgV1, SlotB: imgV2, LastRollback: Rollback{From: B, To: A, Reason: unmarkedReason}}},
		{"power cut while the root is written", []string{"stage v2", "power cycle"},
			Boot{Outcome: Normal, Slot: A}, writingB},
		{"root read back wrong, then a reboot", []string{"stage v2", "root reads back wrong", "power cycle"},
			Boot{Outcome: Normal, Slot: A}, writingB},
		{"restaged after a rollback", []string{"stage v2", "root written", "power cycle", "fail", "power cycle", "stage v2", "root written", "power cycle"},
			Boot{Outcome: Trying, Slot: B}, Record{Active: A, Staged: B, Phase: PhaseStaged, SlotA: imgV1, SlotB: imgV2, LastRollback: rolledOff.LastRollback}},
	}
	byName := map[string]step{}
	for _, s := range steps {
		byName[s.name] = s
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, last := node{fresh, A}, Boot{}
			for _, name := range tt.steps {
				var err error
				if name == "power cycle" {
					n, last, err = powerCycle(n)
				} else {
					n, err = byName[name].do(n)
				}
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
			if last != tt.want || !reflect.DeepEqual(n.r, tt.wantRec) {
				t.Errorf("last boot %+v with %+v\nwant %+v with %+v", last, n.r, tt.want, tt.wantRec)
			}
		})
	}
}
