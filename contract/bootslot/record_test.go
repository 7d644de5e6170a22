package bootslot

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

var (
	imgV1 = Image{Version: "v1.0.0", Digest: "sha256-" + strings.Repeat("1", 64)}
	imgV2 = Image{Version: "v2.0.0", Digest: "sha256-" + strings.Repeat("2", 64)}
	imgV3 = Image{Version: "v3.0.0", Digest: "sha256-" + strings.Repeat("3", 64)}
)

const healthReason = "health gate: apiserver not ready after 5m0s"

// The states of an upgrade of slot b from v1 on a to v2.
var (
	fresh     = Record{Active: A, SlotA: imgV1}
	writingB  = Record{Active: A, Staged: B, Phase: PhaseWriting, SlotA: imgV1, SlotB: imgV2}
	stagedB   = Record{Active: A, Staged: B, Phase: PhaseStaged, Tries: 1, SlotA: imgV1, SlotB: imgV2}
	tryingB   = Record{Active: A, Staged: B, Phase: PhaseStaged, Tries: 0, SlotA: imgV1, SlotB: imgV2}
	failedB   = Record{Active: A, Staged: B, Phase: PhaseStaged, Tries: 0, SlotA: imgV1, SlotB: imgV2, FailReason: healthReason}
	activeB   = Record{Active: B, SlotA: imgV1, SlotB: imgV2}
	rolledOff = Record{Active: A, SlotA: imgV1, SlotB: imgV2, LastRollback: Rollback{From: B, To: A, Reason: healthReason}}
)

func TestRecordRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		r    Record
	}{
		{"fresh", fresh}, {"writing b", writingB}, {"staged b", stagedB}, {"trying b", tryingB},
		{"failed b", failedB}, {"active b", activeB}, {"rolled back", rolledOff},
		{"largest, every reason byte escaped", largest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Encode(tt.r)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.r) {
				t.Errorf("read back %+v, want %+v", got, tt.r)
			}
		})
	}
}

// largest is the record with the longest block.
var largest = Record{
	Active: A, Staged: B, Phase: PhaseStaged, Tries: MaxTries,
	SlotA:        Image{Version: strings.Repeat("1", MaxVersion), Digest: imgV1.Digest},
	SlotB:        Image{Version: strings.Repeat("2", MaxVersion), Digest: imgV2.Digest},
	FailReason:   strings.Repeat("\\", MaxReason),
	LastRollback: Rollback{From: B, To: A, Reason: strings.Repeat("\\", MaxReason)},
}

func TestGRUBsVariablesInTheFirstSector(t *testing.T) {
	b, err := Encode(largest)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range scriptVars {
		at := strings.Index(string(b), "\n"+name+"=")
		end := at + 1 + strings.IndexByte(string(b[at+1:]), '\n')
		if at < 0 || end >= 512 {
			t.Errorf("%s ends at byte %d, outside the first sector", name, end)
		}
	}
}

func TestDecodeKeepsOthersVariables(t *testing.T) {
	b, err := Encode(stagedB)
	if err != nil {
		t.Fatal(err)
	}
	env, _ := ParseBlock(b)
	b, err = RenderBlock(append(Env{{"saved_entry", "kiln"}}, env...))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Decode(b); err != nil || !reflect.DeepEqual(got, stagedB) {
		t.Errorf("got %+v, %v; want %+v", got, err, stagedB)
	}
}

// withVar is r's block with the variable name set to value (added when r
// has none).
func withVar(t *testing.T, r Record, name, value string) []byte {
	t.Helper()
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	env, _ := ParseBlock(b)
	found := false
	for i := range env {
		if env[i].Name == name {
			env[i].Value, found = value, true
		}
	}
	if !found {
		env = append(env, Var{name, value})
	}
	if b, err = RenderBlock(env); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeRefuses(t *testing.T) {
	tests := []struct {
		name        string
		in          func(t *testing.T) []byte
		wantInError string
	}{
		{"malformed block", func(*testing.T) []byte { return []byte("# GRUB Environment Block\n") }, "1024"},
		{"no format", func(t *testing.T) []byte { return block("kiln_active=a\n") }, `kiln_format is "", want "1"`},
		{"another format", func(t *testing.T) []byte { return withVar(t, fresh, "kiln_format", "2") }, `kiln_format is "2"`},
		{"unknown kiln variable", func(t *testing.T) []byte { return withVar(t, fresh, "kiln_c_version", "v1") }, "unknown variable kiln_c_version"},
		{"active not a slot", func(t *testing.T) []byte { return withVar(t, fresh, "kiln_active", "c") }, `active: slot "c" is neither`},
		{"tries not a digit", func(t *testing.T) []byte { return withVar(t, stagedB, "kiln_tries", "x") }, `kiln_tries is "x", not one digit`},
		{"tries two digits", func(t *testing.T) []byte { return withVar(t, stagedB, "kiln_tries", "10") }, `kiln_tries is "10"`},
		{"staged onto the active slot", func(t *testing.T) []byte { return withVar(t, stagedB, "kiln_staged", "a") }, "staged: slot a is the active slot"},
		{"unknown phase", func(t *testing.T) []byte { return withVar(t, stagedB, "kiln_phase", "booting") }, `stage phase "booting"`},
		{"staged slot without a phase", func(t *testing.T) []byte { return withVar(t, stagedB, "kiln_phase", "") }, "with no stage phase"},
		{"tries while writing", func(t *testing.T) []byte { return withVar(t, writingB, "kiln_tries", "1") }, "tries and fail reason are set while b is written"},
		{"active slot without an image", func(t *testing.T) []byte { return withVar(t, fresh, "kiln_a_version", "") }, "slot a: version"},
		{"staged slot without an image", func(t *testing.T) []byte { return withVar(t, writingB, "kiln_b_digest", "") }, "slot b: digest"},
		{"version with a space", func(t *testing.T) []byte { return withVar(t, fresh, "kiln_a_version", "v1 beta") }, `version "v1 beta" is not 1 to 64`},
		{"digest not sha256", func(t *testing.T) []byte { return withVar(t, fresh, "kiln_a_digest", "md5-00") }, `digest "md5-00" is not sha256`},
		{"rollback without to", func(t *testing.T) []byte { return withVar(t, rolledOff, "kiln_rollback_to", "") }, "last rollback: to:"},
		{"rollback without a reason", func(t *testing.T) []byte { return withVar(t, rolledOff, "kiln_rollback_reason", "") }, "last rollback: no reason"},
		{"reason too long", func(t *testing.T) []byte {
			return withVar(t, failedB, "kiln_fail_reason", strings.Repeat("x", MaxReason+1))
		}, "longer than 100 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.in(t))
			if err == nil || !strings.Contains(err.Error(), tt.wantInError) {
				t.Errorf("got %v, want an error saying %q", err, tt.wantInError)
			}
		})
	}
}

func TestEncodeRefusesAnInvalidRecord(t *testing.T) {
	_, err := Encode(Record{Active: A, Staged: A, Phase: PhaseStaged, Tries: 1, SlotA: imgV1})
	if want := "boot-state record (active a, staged a (tries 1)): staged: slot a is the active slot"; err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
	if errors.Is(err, ErrMalformed) {
		t.Error("an invalid record is not a malformed block")
	}
}

func TestState(t *testing.T) {
	tests := []struct {
		r    Record
		want string
	}{
		{fresh, "active a"},
		{writingB, "active a, writing b"},
		{stagedB, "active a, staged b (tries 1)"},
		{failedB, "active a, staged b (tries 0, failed: " + healthReason + ")"},
	}
	for _, tt := range tests {
		if got := tt.r.State(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}

func TestReason(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"one line kept", "etcd unhealthy", "etcd unhealthy"},
		{"lines joined", "  first\nsecond\ttab\n", "first second tab"},
		{"cut to the limit", strings.Repeat("x", MaxReason+5), strings.Repeat("x", MaxReason)},
		{"cut at a character", strings.Repeat("x", MaxReason-1) + "é", strings.Repeat("x", MaxReason-1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Reason(tt.in); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSlotNames(t *testing.T) {
	tests := []struct {
		slot                          Slot
		label, kernel, initrd, cmdArg string
	}{
		{A, "KILN-ROOT-A", "/kiln/a/vmlinuz", "/kiln/a/initrd.img", "kiln.slot=a"},
		{B, "KILN-ROOT-B", "/kiln/b/vmlinuz", "/kiln/b/initrd.img", "kiln.slot=b"},
	}
	for _, tt := range tests {
		cmd := Cmdline(tt.slot)
		if tt.slot.PartLabel() != tt.label || tt.slot.Kernel() != tt.kernel || tt.slot.Initrd() != tt.initrd ||
			cmd[0] != "root=live:PARTLABEL="+tt.label || cmd[len(cmd)-1] != tt.cmdArg {
			t.Errorf("slot %s: label %s, kernel %s, initrd %s, command line %q", tt.slot,
				tt.slot.PartLabel(), tt.slot.Kernel(), tt.slot.Initrd(), cmd)
		}
		if tt.slot.Other() == tt.slot {
			t.Errorf("slot %s is its own other", tt.slot)
		}
	}
}

func TestBootedSlot(t *testing.T) {
	tests := []struct {
		name, cmdline string
		want          Slot
		wantErr       string
	}{
		{"a", "root=live:PARTLABEL=KILN-ROOT-A console=ttyS0 kiln.slot=a quiet\n", A, ""},
		{"last wins", "kiln.slot=a kiln.slot=b", B, ""},
		{"missing", "root=live:PARTLABEL=KILN-ROOT console=ttyS0", "", "no kiln.slot= on the kernel command line"},
		{"not a slot", "kiln.slot=c", "", `kiln.slot=: slot "c" is neither`},
		{"prefix only", "kiln.slotx=a", "", "no kiln.slot="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := BootedSlot(tt.cmdline)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("got %q, %v; want an error saying %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
