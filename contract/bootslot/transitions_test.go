package bootslot

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// checkTransition compares a transition's result with want, or its error
// with wantErr: an ErrTransition, or any error when wantErr is not about
// the transition itself.
func checkTransition(t *testing.T, got Record, err error, want Record, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("got %+v, %v; want an error saying %q", got, err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestStage(t *testing.T) {
	writingBV3 := writingB
	writingBV3.SlotB = imgV3
	tests := []struct {
		name    string
		from    Record
		slot    Slot
		img     Image
		want    Record
		wantErr string
	}{
		{"onto the inactive slot", fresh, B, imgV2, writingB, ""},
		{"over an old image", Record{Active: A, SlotA: imgV1, SlotB: imgV3}, B, imgV2, writingB, ""},
		{"after a rollback, which it keeps", rolledOff, B, imgV3,
			Record{Active: A, Staged: B, Phase: PhaseWriting, SlotA: imgV1, SlotB: imgV3, LastRollback: rolledOff.LastRollback}, ""},
		{"replacing a stage being written", writingB, B, imgV3, writingBV3, ""},
		{"replacing a stage not yet tried", stagedB, B, imgV3, writingBV3, ""},
		{"onto the active slot", fresh, A, imgV2, Record{},
			"staging v2.0.0 on slot a (record: active a): slot a is the active slot"},
		{"over a stage being tried", tryingB, B, imgV3, Record{},
			"staging v3.0.0 on slot b (record: active a, staged b (tries 0)): the stage of b has begun its trying boot"},
		{"over a failed try", failedB, B, imgV3, Record{}, "the stage of b has begun its trying boot"},
		{"an image without a digest", fresh, B, Image{Version: "v2"}, Record{}, `staging v2 on slot b (record: active a): image: digest ""`},
		{"onto no slot", fresh, "c", imgV2, Record{}, `staging v2.0.0 on slot c (record: active a): slot "c" is neither`},
		{"from an invalid record", Record{Active: "c"}, B, imgV2, Record{}, `staging v2.0.0 on slot b (record: active c): active: slot "c"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Stage(tt.from, tt.slot, tt.img)
			checkTransition(t, got, err, tt.want, tt.wantErr)
		})
	}
}

func TestStageWritten(t *testing.T) {
	tests := []struct {
		name    string
		from    Record
		slot    Slot
		digest  string
		want    Record
		wantErr string
	}{
		{"digest read back matches", writingB, B, imgV2.Digest, stagedB, ""},
		{"digest read back differs", writingB, B, imgV3.Digest, Record{},
			"finishing the stage of slot b (record: active a, writing b): its root reads back as " + imgV3.Digest + ", the staged image is " + imgV2.Digest},
		{"nothing being written", fresh, B, imgV2.Digest, Record{}, "(record: active a): slot b is not being written"},
		{"already staged", stagedB, B, imgV2.Digest, Record{}, "(record: active a, staged b (tries 1)): slot b is not being written"},
		{"another slot", writingB, A, imgV1.Digest, Record{}, "slot a is not being written"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := StageWritten(tt.from, tt.slot, tt.digest)
			checkTransition(t, got, err, tt.want, tt.wantErr)
		})
	}
}

// chooseCases is what GRUB does for each state, which the Go mirror and
// the real GRUB script (TestScriptInGrubEmu) are both held to.
var chooseCases = []struct {
	name  string
	from  Record
	boots Slot
	after Record
}{
	{"nothing staged", fresh, A, fresh},
	{"active b", activeB, B, activeB},
	{"being written", writingB, A, writingB},
	{"staged, a try left", stagedB, B, tryingB},
	{"staged, tried", tryingB, A, tryingB},
	{"staged, failed", failedB, A, failedB},
	{"staged a from b, tries 3",
		Record{Active: B, Staged: A, Phase: PhaseStaged, Tries: 3, SlotA: imgV3, SlotB: imgV2},
		A, Record{Active: B, Staged: A, Phase: PhaseStaged, Tries: 2, SlotA: imgV3, SlotB: imgV2}},
	{"after a rollback", rolledOff, A, rolledOff},
}

func TestChoose(t *testing.T) {
	for _, tt := range chooseCases {
		t.Run(tt.name, func(t *testing.T) {
			slot, after := Choose(tt.from)
			if slot != tt.boots || !reflect.DeepEqual(after, tt.after) {
				t.Errorf("boots %s with %+v, want %s with %+v", slot, after, tt.boots, tt.after)
			}
		})
	}
}

func TestConclude(t *testing.T) {
	unmarked := Rollback{From: B, To: A, Reason: unmarkedReason}
	failed := Rollback{From: B, To: A, Reason: healthReason}
	tests := []struct {
		name    string
		from    Record
		booted  Slot
		want    Boot
		after   Record
		wantErr string
	}{
		{"normal boot", fresh, A, Boot{Outcome: Normal, Slot: A}, fresh, ""},
		{"normal boot of b", activeB, B, Boot{Outcome: Normal, Slot: B}, activeB, ""},
		{"normal boot while b is written", writingB, A, Boot{Outcome: Normal, Slot: A}, writingB, ""},
		{"normal boot before GRUB tried b", stagedB, A, Boot{Outcome: Normal, Slot: A}, stagedB, ""},
		{"trying boot", tryingB, B, Boot{Outcome: Trying, Slot: B}, tryingB, ""},
		{"rolled back, the trying boot failed", failedB, A,
			Boot{Outcome: RolledBack, Slot: A, Rollback: failed},
			Record{Active: A, SlotA: imgV1, SlotB: imgV2, LastRollback: failed}, ""},
		{"rolled back, the trying boot never said", tryingB, A,
			Boot{Outcome: RolledBack, Slot: A, Rollback: unmarked},
			Record{Active: A, SlotA: imgV1, SlotB: imgV2, LastRollback: unmarked}, ""},
		{"booted a slot being written", writingB, B, Boot{}, Record{},
			"booted slot b (record: active a, writing b): its root is still being written"},
		{"booted the wrong slot", fresh, B, Boot{}, Record{},
			"booted slot b (record: active a): it is neither the active slot nor a staged one"},
		{"booted the wrong slot after a rollback", rolledOff, B, Boot{}, Record{}, "neither the active slot nor a staged one"},
		{"invalid record", Record{Active: A}, A, Boot{}, Record{}, "booted slot a (record: active a): slot a: no image version and digest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, after, err := Conclude(tt.from, tt.booted)
			if tt.wantErr == "" && (got != tt.want) {
				t.Errorf("concluded %+v, want %+v", got, tt.want)
			}
			checkTransition(t, after, err, tt.after, tt.wantErr)
		})
	}
}

func TestRollbackConsoleLine(t *testing.T) {
	got := Rollback{From: B, To: A, Reason: healthReason}.ConsoleLine()
	if want := "kiln: rolled back from b to a: " + healthReason; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestMarkGood(t *testing.T) {
	tests := []struct {
		name    string
		from    Record
		booted  Slot
		want    Record
		wantErr string
	}{
		{"the trying boot", tryingB, B, activeB, ""},
		{"the trying boot with tries left", stagedB, B, activeB, ""},
		{"the trying boot after an earlier rollback", Record{Active: A, Staged: B, Phase: PhaseStaged, SlotA: imgV1, SlotB: imgV2, LastRollback: rolledOff.LastRollback},
			B, Record{Active: B, SlotA: imgV1, SlotB: imgV2, LastRollback: rolledOff.LastRollback}, ""},
		{"a normal boot", fresh, A, Record{},
			"marking slot a good (record: active a): this boot of a is not a trying boot of a staged slot"},
		{"the active slot while b is tried", tryingB, A, Record{}, "this boot of a is not a trying boot"},
		{"a slot being written", writingB, B, Record{}, "(record: active a, writing b): this boot of b is not a trying boot"},
		{"a failed trying boot", failedB, B, Record{}, "marking slot b good (record: active a, staged b (tries 0, failed: " + healthReason + ")): this trying boot has already failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := MarkGood(tt.from, tt.booted)
			checkTransition(t, got, err, tt.want, tt.wantErr)
			if tt.wantErr != "" && !errors.Is(err, ErrTransition) {
				t.Errorf("%v is not an ErrTransition", err)
			}
		})
	}
}

func TestFail(t *testing.T) {
	tests := []struct {
		name    string
		from    Record
		booted  Slot
		reason  string
		want    Record
		wantErr string
	}{
		{"the trying boot", tryingB, B, healthReason, failedB, ""},
		{"a reason made to fit", tryingB, B, "  health gate:\napiserver not ready after 5m0s\n", failedB, ""},
		{"no reason", tryingB, B, " \n", Record{}, "failing the trying boot of slot b (record: active a, staged b (tries 0)): no reason given"},
		{"a normal boot", fresh, A, healthReason, Record{}, "failing the trying boot of slot a (record: active a): this boot of a is not a trying boot"},
		{"twice", failedB, B, "again", Record{}, "this trying boot has already failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Fail(tt.from, tt.booted, tt.reason)
			checkTransition(t, got, err, tt.want, tt.wantErr)
		})
	}
}
