package bootslot

import (
	"errors"
	"fmt"
)

// ErrTransition is wrapped by every refused transition; the message names
// the record's state.
var ErrTransition = errors.New("boot-state transition refused")

func refuse(r Record, what, why string, args ...any) error {
	return fmt.Errorf("%w: %s (record: %s): %s", ErrTransition, what, r.State(), fmt.Sprintf(why, args...))
}

// invalid wraps err, a record or an argument that is not valid, with what
// was done and the record's state.
func invalid(r Record, what string, err error) error {
	return fmt.Errorf("%s (record: %s): %w", what, r.State(), err)
}

// started reports whether GRUB has begun trying the stage.
func (r Record) started() bool {
	return r.Phase == PhaseStaged && (r.Tries < StageTries || r.FailReason != "")
}

// Stage is the first of a stage's two writes: it records that slot is
// being written with img, so a power cut while the root is written leaves
// GRUB booting the active slot. A stage that GRUB has not begun trying is
// replaced; one it has is refused until it is marked good or rolled back.
func Stage(r Record, slot Slot, img Image) (Record, error) {
	what := fmt.Sprintf("staging %s on slot %s", img.Version, slot)
	if err := r.Validate(); err != nil {
		return Record{}, invalid(r, what, err)
	}
	switch {
	case slot == r.Active:
		return Record{}, refuse(r, what, "slot %s is the active slot", slot)
	case r.started():
		return Record{}, refuse(r, what, "the stage of %s has begun its trying boot; it must be marked good or roll back first", r.Staged)
	}
	if _, err := ParseSlot(string(slot)); err != nil {
		return Record{}, invalid(r, what, err)
	}
	if err := validateImage(img, true); err != nil {
		return Record{}, invalid(r, what, fmt.Errorf("image: %w", err))
	}
	r = r.clearStage().withImage(slot, img)
	r.Staged, r.Phase = slot, PhaseWriting
	return r, nil
}

// StageWritten is the second write: slot's root is written and digest is
// what was read back from it. When digest is the staged image's, the slot
// gets StageTries boots; otherwise it is refused, and the stage stays in
// PhaseWriting, which GRUB never boots.
func StageWritten(r Record, slot Slot, digest string) (Record, error) {
	what := fmt.Sprintf("finishing the stage of slot %s", slot)
	if err := r.Validate(); err != nil {
		return Record{}, invalid(r, what, err)
	}
	if r.Phase != PhaseWriting || r.Staged != slot {
		return Record{}, refuse(r, what, "slot %s is not being written", slot)
	}
	if want := r.Image(slot).Digest; digest != want {
		return Record{}, refuse(r, what, "its root reads back as %s, the staged image is %s", digest, want)
	}
	r.Phase, r.Tries = PhaseStaged, StageTries
	return r, nil
}

// Choose is what the GRUB script (Script) does at boot: a staged slot
// with tries left loses one and is booted; anything else boots the active
// slot. It returns the slot and the record as save_env leaves it. The
// script boots the staged slot only once save_env has written the fewer
// tries; when it cannot, it boots the active slot and the record stays r.
func Choose(r Record) (Slot, Record) {
	if r.Phase == PhaseStaged && r.Tries > 0 {
		r.Tries--
		return r.Staged, r
	}
	return r.Active, r
}

// Outcome is what the agent concludes about the boot it runs in.
type Outcome string

const (
	// Normal: the active slot, with no stage being tried.
	Normal Outcome = "normal"
	// Trying: the staged slot's trying boot; it ends in MarkGood or Fail.
	Trying Outcome = "trying"
	// RolledBack: the active slot, after a trying boot that was not
	// marked good.
	RolledBack Outcome = "rolled back"
)

// Boot is the agent's conclusion about its boot.
type Boot struct {
	Outcome Outcome
	Slot    Slot
	// Rollback is set when Outcome is RolledBack.
	Rollback Rollback
}

// unmarkedReason is a rollback's reason when the trying boot wrote none:
// it ended (a power cut, a hang the watchdog ended) before the agent
// marked it good or failed it.
const unmarkedReason = "its trying boot ended before it was marked good"

// Conclude is what the agent makes of its boot from booted (BootedSlot)
// and the record GRUB left. It returns the record to write back: after a
// rollback the stage is cleared and LastRollback says why, otherwise r.
// Booting a slot that is neither the active one nor the one being tried
// is an error: GRUB did not follow the record.
func Conclude(r Record, booted Slot) (Boot, Record, error) {
	what := fmt.Sprintf("booted slot %s", booted)
	if err := r.Validate(); err != nil {
		return Boot{}, Record{}, invalid(r, what, err)
	}
	switch {
	case booted == r.Active && r.Phase == PhaseStaged && r.Tries == 0:
		rb := Rollback{From: r.Staged, To: r.Active, Reason: r.FailReason}
		if rb.Reason == "" {
			rb.Reason = unmarkedReason
		}
		r = r.clearStage()
		r.LastRollback = rb
		return Boot{Outcome: RolledBack, Slot: booted, Rollback: rb}, r, nil
	case booted == r.Active:
		return Boot{Outcome: Normal, Slot: booted}, r, nil
	case booted == r.Staged && r.Phase == PhaseStaged:
		return Boot{Outcome: Trying, Slot: booted}, r, nil
	case booted == r.Staged:
		return Boot{}, Record{}, refuse(r, what, "its root is still being written")
	}
	return Boot{}, Record{}, refuse(r, what, "it is neither the active slot nor a staged one")
}

// trying refuses, for what, a boot of booted that is not the staged
// slot's trying boot or has already failed.
func trying(r Record, booted Slot, what string) error {
	if err := r.Validate(); err != nil {
		return invalid(r, what, err)
	}
	switch {
	case r.Phase != PhaseStaged || booted != r.Staged:
		return refuse(r, what, "this boot of %s is not a trying boot of a staged slot", booted)
	case r.FailReason != "":
		return refuse(r, what, "this trying boot has already failed")
	}
	return nil
}

// MarkGood is the agent's verdict on a trying boot that passed its health
// gate: the booted slot becomes the active one and the stage is cleared.
func MarkGood(r Record, booted Slot) (Record, error) {
	if err := trying(r, booted, fmt.Sprintf("marking slot %s good", booted)); err != nil {
		return Record{}, err
	}
	r = r.clearStage()
	r.Active = booted
	return r, nil
}

// Fail is the agent's verdict on a trying boot that failed its health
// gate, written before it forces the reboot that returns to the active
// slot; Conclude reports the reason on that boot. reason is made to fit
// by Reason.
func Fail(r Record, booted Slot, reason string) (Record, error) {
	what := fmt.Sprintf("failing the trying boot of slot %s", booted)
	if err := trying(r, booted, what); err != nil {
		return Record{}, err
	}
	if r.FailReason = Reason(reason); r.FailReason == "" {
		return Record{}, refuse(r, what, "no reason given")
	}
	return r, nil
}
