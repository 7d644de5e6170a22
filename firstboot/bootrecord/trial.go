package bootrecord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/internal/retry"
)

// Conclude reads what GRUB left, concludes what this boot of booted is
// and, after a rollback, writes the record back with the stage cleared
// and the rollback kept (bootslot.Conclude). The caller says
// Boot.Rollback.ConsoleLine() on the console.
func Conclude(s Store, booted bootslot.Slot) (bootslot.Boot, error) {
	r, err := s.Read()
	if err != nil {
		return bootslot.Boot{}, err
	}
	boot, next, err := bootslot.Conclude(r, booted)
	if err != nil {
		return bootslot.Boot{}, err
	}
	if boot.Outcome == bootslot.RolledBack {
		if err := s.Write(next); err != nil {
			return boot, err
		}
	}
	return boot, nil
}

// Trial decides a trying boot: it marks the booted slot good once the
// node passes its health gate, or records why not and reboots onto the
// active slot. The agent runs it itself, after its role, so a boot is
// never marked good by a unit that did not run.
type Trial struct {
	Store  Store
	Booted bootslot.Slot
	// Gate is nil once this boot passes the health gate; its error, the
	// last one when the bound ends, is the recorded reason, cut to
	// bootslot.MaxReason bytes: it should name the unmet conditions
	// first.
	Gate func(ctx context.Context) error
	// Bound is how long the gate may take after the role is done.
	Bound time.Duration
	// Reboot restarts the machine (systemctl reboot).
	Reboot func(ctx context.Context) error
	Log    retry.Logf
}

// ErrFailed is wrapped by Decide's error for a trying boot that failed:
// the record says why and the machine is rebooting onto the active slot.
var ErrFailed = errors.New("the trying boot failed")

// Decide gives the verdict on the trying boot once its role ended with
// roleErr: on a pass the booted slot becomes the active one; otherwise
// the reason is recorded and the machine reboots. An error writing the
// record is returned as is: GRUB then rolls back on the next boot all the
// same, as the staged slot has no tries left.
func (t Trial) Decide(ctx context.Context, roleErr error) error {
	reason := ""
	if roleErr != nil {
		reason = "role: " + retry.OneLine(roleErr)
	} else {
		var last error
		err := retry.Wait(ctx, "slot "+string(t.Booted)+"'s trying boot to pass the health gate", t.Bound, t.Log, func(ctx context.Context) error {
			last = t.Gate(ctx)
			return last
		})
		switch {
		case err != nil && ctx.Err() != nil:
			return err // stopped, not failed: GRUB rolls back unless a later run marks it good
		case err != nil && errors.Is(last, retry.ErrFinal):
			reason = "health gate: " + strings.TrimPrefix(retry.OneLine(last), retry.ErrFinal.Error()+": ")
		case err != nil && last != nil:
			reason = fmt.Sprintf("health gate not passed in %s: %s", t.Bound, retry.OneLine(last))
		case err != nil:
			reason = "health gate: " + retry.OneLine(err)
		}
	}
	if reason == "" {
		good, err := t.Store.Update(func(r bootslot.Record) (bootslot.Record, error) { return bootslot.MarkGood(r, t.Booted) })
		if err != nil {
			return err
		}
		t.Log("kiln: slot %s (%s) passed the health gate and is now the active slot", t.Booted, good.Image(t.Booted).Version)
		return nil
	}
	return t.Fail(ctx, reason)
}

// Fail records reason as the trying boot's failure and reboots: the
// verdict of a boot that cannot pass its gate whatever happens next.
func (t Trial) Fail(ctx context.Context, reason string) error {
	failed, err := t.Store.Update(func(r bootslot.Record) (bootslot.Record, error) { return bootslot.Fail(r, t.Booted, reason) })
	if err != nil {
		return err
	}
	t.Log("kiln: the trying boot of slot %s failed (%s): rebooting onto slot %s", t.Booted, failed.FailReason, failed.Active)
	if err := t.Reboot(ctx); err != nil {
		return fmt.Errorf("%w (%s), and the reboot onto slot %s did not start: %v", ErrFailed, failed.FailReason, failed.Active, err)
	}
	return fmt.Errorf("%w: %s; rebooting onto slot %s", ErrFailed, failed.FailReason, failed.Active)
}

// Expire is the trying boot's deadline, kept by a unit apart from the
// agent (kiln-boot-slot.service): it waits until the boot has lasted
// deadline (uptime says how long it has) and then, if the boot is still
// an unjudged trying boot of t.Booted, fails it and reboots. A boot the
// agent judged, or one that is not a trying boot, returns nil at once
// when it is judged.
func (t Trial) Expire(ctx context.Context, deadline time.Duration, uptime func() (time.Duration, error), poll time.Duration) error {
	for {
		r, err := t.Store.Read()
		if err != nil {
			return err
		}
		if boot, _, err := bootslot.Conclude(r, t.Booted); err != nil || boot.Outcome != bootslot.Trying || r.FailReason != "" {
			return err // judged, or not a trying boot
		}
		up, err := uptime()
		if err != nil {
			return err
		}
		if up >= deadline {
			return t.Fail(ctx, fmt.Sprintf("no verdict within %s of the boot", deadline))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(poll, deadline-up)):
		}
	}
}
