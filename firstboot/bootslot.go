package firstboot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/firstboot/bootrecord"
)

// Bounds of a trying boot (docs/upgrade.md): the role's health gate may
// take GateBound once the role is done, and a boot that has no verdict
// TrialDeadline after the kernel started is failed by kiln-boot-slot.
const (
	GateBound     = 10 * time.Minute
	TrialDeadline = 45 * time.Minute
)

// RunBootSlot is kiln-boot-slot.service (kiln firstboot slot), early on
// every boot of a disk node: it concludes what this boot is from the
// boot-state record GRUB left, says a rollback on the console
// ("kiln: rolled back from b to a: <reason>"), and on a trying boot keeps
// its deadline: a boot the agent has not judged within deadline is failed
// and rebooted onto the active slot, whatever stopped the agent. Boots
// that name no slot (ISO, PXE) have nothing to conclude.
func RunBootSlot(ctx context.Context, root string, console io.Writer, sys System, deadline time.Duration) error {
	logf := func(format string, args ...any) { fmt.Fprintf(console, prefix+format+"\n", args...) }
	booted, store, err := slotStore(ctx, root, sys)
	if errors.Is(err, bootrecord.ErrNoSlots) {
		return nil
	}
	if err != nil {
		return err
	}
	boot, err := bootrecord.Conclude(store, booted)
	if err != nil {
		return fmt.Errorf("slot %s: %w", booted, err)
	}
	switch boot.Outcome {
	case bootslot.RolledBack:
		fmt.Fprintln(console, boot.Rollback.ConsoleLine())
		return nil
	case bootslot.Normal:
		logf("slot %s: booted the active slot", booted)
		return nil
	}
	logf("slot %s: trying its image once: the role's health gate marks it good, or it is failed %s after the boot", booted, deadline)
	t := bootrecord.Trial{Store: store, Booted: booted, Reboot: rebooter(sys), Log: logf}
	return t.Expire(ctx, deadline, func() (time.Duration, error) { return uptime(root) }, 30*time.Second)
}

// trialOf is this boot's Trial when it is the trying boot of a staged
// slot, else nil, and the version the boot-state record gives the image
// of the slot this boot runs ("" for a boot that names no slot); the
// error is the reason it could not tell. The record is only read:
// kiln-boot-slot concludes it.
func trialOf(ctx context.Context, root string, sys System, logf func(string, ...any)) (*bootrecord.Trial, string, error) {
	booted, store, err := slotStore(ctx, root, sys)
	if errors.Is(err, bootrecord.ErrNoSlots) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	r, err := store.Read()
	if err != nil {
		return nil, "", err
	}
	image := r.Image(booted).Version
	boot, _, err := bootslot.Conclude(r, booted)
	if err != nil || boot.Outcome != bootslot.Trying || r.FailReason != "" {
		return nil, image, err
	}
	return &bootrecord.Trial{Store: store, Booted: booted, Bound: GateBound, Reboot: rebooter(sys), Log: logf}, image, nil
}

// slotStore is the slot this boot runs and the boot-state record on the
// mounted ESP, or bootrecord.ErrNoSlots for a boot that names no slot.
func slotStore(ctx context.Context, root string, sys System) (bootslot.Slot, bootrecord.Store, error) {
	booted, err := bootrecord.Booted(root)
	if errors.Is(err, bootrecord.ErrNoSlots) {
		return "", bootrecord.Store{}, err
	}
	if err != nil {
		return "", bootrecord.Store{}, fmt.Errorf("the booted slot: %w", err)
	}
	store, err := bootrecord.Mount(ctx, root, sys)
	return booted, store, err
}

func rebooter(sys System) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := sys.Run(ctx, "systemctl", "reboot")
		return err
	}
}
