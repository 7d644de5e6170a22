package bootslot

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Phase is how far the stage of a slot has got.
type Phase string

const (
	// PhaseWriting: the staged slot's root is being written; GRUB boots the
	// active slot.
	PhaseWriting Phase = "writing"
	// PhaseStaged: the staged slot's root is written and its digest checked;
	// GRUB boots it while it has tries left.
	PhaseStaged Phase = "staged"
)

// StageTries is how many boots a stage gets: one. MaxTries keeps tries to
// one digit, so GRUB's save_env changes one byte of the block in place.
const (
	StageTries = 1
	MaxTries   = 9
)

// Limits that keep the largest record inside BlockSize with room to
// spare: a version is at most MaxVersion of A-Z a-z 0-9 . _ + -, a reason
// at most MaxReason bytes of one line.
const (
	MaxVersion = 64
	MaxReason  = 100
)

// Image is what a slot holds: the image's version and its root
// squashfs's digest (sha256-<hex>, the form of kiln.rootfs.hash).
type Image struct{ Version, Digest string }

// Rollback is a trying boot that was not marked good: the next boot came
// back on the active slot.
type Rollback struct {
	From, To Slot
	Reason   string
}

// ConsoleLine is what the agent says on the console about the rollback.
func (r Rollback) ConsoleLine() string {
	return fmt.Sprintf("kiln: rolled back from %s to %s: %s", r.From, r.To, r.Reason)
}

// Record is the boot state the GRUB script, the agent and the upgrade
// share. The zero Staged and Phase mean nothing is staged.
type Record struct {
	Active Slot
	Staged Slot
	Phase  Phase
	Tries  int
	// SlotA and SlotB are what each slot holds; a slot never written is
	// the zero Image.
	SlotA, SlotB Image
	// FailReason is why the trying boot of Staged failed, written by that
	// boot before its forced reboot.
	FailReason   string
	LastRollback Rollback
}

// Image is what slot s holds.
func (r Record) Image(s Slot) Image {
	if s == B {
		return r.SlotB
	}
	return r.SlotA
}

func (r Record) withImage(s Slot, img Image) Record {
	if s == B {
		r.SlotB = img
	} else {
		r.SlotA = img
	}
	return r
}

// State names the record's state for messages: "active a",
// "active a, writing b", "active a, staged b (tries 1)", "active a,
// staged b (tries 0, failed: <reason>)".
func (r Record) State() string {
	s := "active " + string(r.Active)
	switch r.Phase {
	case PhaseWriting:
		s += ", writing " + string(r.Staged)
	case PhaseStaged:
		s += fmt.Sprintf(", staged %s (tries %d", r.Staged, r.Tries)
		if r.FailReason != "" {
			s += ", failed: " + r.FailReason
		}
		s += ")"
	}
	return s
}

func (r Record) clearStage() Record {
	r.Staged, r.Phase, r.Tries, r.FailReason = "", "", 0, ""
	return r
}

// Validate checks the record's fields against each other.
func (r Record) Validate() error {
	if _, err := ParseSlot(string(r.Active)); err != nil {
		return fmt.Errorf("active: %w", err)
	}
	if err := r.validateStage(); err != nil {
		return err
	}
	for _, s := range Slots {
		if err := validateImage(r.Image(s), s == r.Active || s == r.Staged); err != nil {
			return fmt.Errorf("slot %s: %w", s, err)
		}
	}
	if err := validateRollback(r.LastRollback); err != nil {
		return fmt.Errorf("last rollback: %w", err)
	}
	return nil
}

func (r Record) validateStage() error {
	switch r.Phase {
	case "":
		if r.Staged != "" || r.Tries != 0 || r.FailReason != "" {
			return errors.New("staged, tries and fail reason are set with no stage phase")
		}
		return nil
	case PhaseWriting, PhaseStaged:
	default:
		return fmt.Errorf("stage phase %q is neither %q nor %q", r.Phase, PhaseWriting, PhaseStaged)
	}
	if _, err := ParseSlot(string(r.Staged)); err != nil {
		return fmt.Errorf("staged: %w", err)
	}
	if r.Staged == r.Active {
		return fmt.Errorf("staged: slot %s is the active slot", r.Staged)
	}
	if r.Tries < 0 || r.Tries > MaxTries {
		return fmt.Errorf("tries: %d is not within 0 to %d", r.Tries, MaxTries)
	}
	if r.Phase == PhaseWriting && (r.Tries != 0 || r.FailReason != "") {
		return fmt.Errorf("tries and fail reason are set while %s is written", r.Staged)
	}
	return validateReason(r.FailReason)
}

func validateImage(img Image, needed bool) error {
	switch {
	case img == Image{} && needed:
		return errors.New("no image version and digest")
	case img == Image{}:
		return nil
	case img.Version == "" || len(img.Version) > MaxVersion || strings.ContainsFunc(img.Version, notVersionRune):
		return fmt.Errorf("version %q is not 1 to %d of the characters A-Z a-z 0-9 . _ + -", img.Version, MaxVersion)
	}
	return validateDigest(img.Digest)
}

func notVersionRune(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._+-", r))
}

func validateDigest(d string) error {
	h, ok := strings.CutPrefix(d, "sha256-")
	if _, err := hex.DecodeString(h); !ok || len(h) != 64 || err != nil || strings.ToLower(h) != h {
		return fmt.Errorf("digest %q is not sha256-<64 lower-case hex digits>", d)
	}
	return nil
}

func validateRollback(rb Rollback) error {
	if rb == (Rollback{}) {
		return nil
	}
	if _, err := ParseSlot(string(rb.From)); err != nil {
		return fmt.Errorf("from: %w", err)
	}
	if _, err := ParseSlot(string(rb.To)); err != nil {
		return fmt.Errorf("to: %w", err)
	}
	if rb.From == rb.To {
		return fmt.Errorf("from and to are both slot %s", rb.From)
	}
	if rb.Reason == "" {
		return errors.New("no reason")
	}
	return validateReason(rb.Reason)
}

func validateReason(s string) error {
	if len(s) > MaxReason || strings.ContainsFunc(s, isControl) {
		return fmt.Errorf("reason %q is longer than %d bytes or holds control characters", s, MaxReason)
	}
	return nil
}

func isControl(r rune) bool { return r < ' ' || r == 0x7f }

// Reason makes text fit a record's reason: one line (control characters
// become spaces) of at most MaxReason bytes, cut at a character boundary.
func Reason(text string) string {
	s := strings.Map(func(r rune) rune {
		if isControl(r) {
			return ' '
		}
		return r
	}, strings.TrimSpace(text))
	for len(s) > MaxReason {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// The record's variables in the environment block, in the order Encode
// writes them: those the GRUB script reads come first, inside the
// block's first 512-byte sector, so a write torn between sectors shows
// GRUB all of the old values or all of the new. Variables without the
// kiln_ prefix belong to others and are ignored.
const (
	varFormat         = "kiln_format"
	varActive         = "kiln_active"
	varStaged         = "kiln_staged"
	varPhase          = "kiln_phase"
	varTries          = "kiln_tries"
	varFailReason     = "kiln_fail_reason"
	varRollbackFrom   = "kiln_rollback_from"
	varRollbackTo     = "kiln_rollback_to"
	varRollbackReason = "kiln_rollback_reason"
	format            = "1"
	varPrefix         = "kiln_"
)

func versionVar(s Slot) string { return varPrefix + string(s) + "_version" }
func digestVar(s Slot) string  { return varPrefix + string(s) + "_digest" }

// Encode renders a valid record as a GRUB environment block.
func Encode(r Record) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("boot-state record (%s): %w", r.State(), err)
	}
	env := Env{
		{varFormat, format},
		{varActive, string(r.Active)},
		{varStaged, string(r.Staged)},
		{varPhase, string(r.Phase)},
		{varTries, strconv.Itoa(r.Tries)},
		{varFailReason, r.FailReason},
	}
	for _, s := range Slots {
		env = append(env, Var{versionVar(s), r.Image(s).Version}, Var{digestVar(s), r.Image(s).Digest})
	}
	env = append(env,
		Var{varRollbackFrom, string(r.LastRollback.From)},
		Var{varRollbackTo, string(r.LastRollback.To)},
		Var{varRollbackReason, r.LastRollback.Reason})
	return RenderBlock(env)
}

// Decode reads a record from a GRUB environment block and validates it.
func Decode(b []byte) (Record, error) {
	env, err := ParseBlock(b)
	if err != nil {
		return Record{}, err
	}
	if err := checkVars(env); err != nil {
		return Record{}, fmt.Errorf("boot-state record: %w", err)
	}
	r, err := fromEnv(env)
	if err != nil {
		return Record{}, fmt.Errorf("boot-state record: %w", err)
	}
	if err := r.Validate(); err != nil {
		return Record{}, fmt.Errorf("boot-state record (%s): %w", r.State(), err)
	}
	return r, nil
}

// checkVars refuses a block of another format or with kiln_ variables
// this format does not have.
func checkVars(env Env) error {
	if f, _ := env.Get(varFormat); f != format {
		return fmt.Errorf("%s is %q, want %q", varFormat, f, format)
	}
	known := map[string]bool{varFormat: true, varActive: true, varStaged: true, varPhase: true,
		varTries: true, varFailReason: true, varRollbackFrom: true, varRollbackTo: true, varRollbackReason: true}
	for _, s := range Slots {
		known[versionVar(s)], known[digestVar(s)] = true, true
	}
	for _, v := range env {
		if strings.HasPrefix(v.Name, varPrefix) && !known[v.Name] {
			return fmt.Errorf("unknown variable %s", v.Name)
		}
	}
	return nil
}

func fromEnv(env Env) (Record, error) {
	get := func(name string) string { v, _ := env.Get(name); return v }
	r := Record{
		Active:     Slot(get(varActive)),
		Staged:     Slot(get(varStaged)),
		Phase:      Phase(get(varPhase)),
		FailReason: get(varFailReason),
		LastRollback: Rollback{
			From: Slot(get(varRollbackFrom)), To: Slot(get(varRollbackTo)), Reason: get(varRollbackReason),
		},
	}
	for _, s := range Slots {
		r = r.withImage(s, Image{Version: get(versionVar(s)), Digest: get(digestVar(s))})
	}
	tries := get(varTries)
	n, err := strconv.Atoi(tries)
	if err != nil || len(tries) != 1 {
		return Record{}, fmt.Errorf("%s is %q, not one digit", varTries, tries)
	}
	r.Tries = n
	return r, nil
}
