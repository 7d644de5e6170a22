// Package bootslot is the contract of a disk node's two root slots, a and
// b, between the GRUB script that boots them, the node's agent and the
// tool that stages an upgrade: the boot-state record they share (a GRUB
// environment block on the ESP: ParseBlock, RenderBlock, Encode, Decode),
// its states and the transitions each side may make (Stage, StageWritten,
// Choose, Conclude, MarkGood, Fail), the GRUB script that tries a staged
// slot once (Script), each slot's kernel, initrd and root partition, and
// the kernel argument that tells the agent which slot it booted
// (SlotArg). docs/upgrade.md describes it. The builder lays the raw disk
// out by it; firstboot/bootrecord and firstboot/stage are the node's side.
package bootslot

import (
	"fmt"
	"strings"

	"github.com/kiln-project/kiln/contract/layout"
	"github.com/kiln-project/kiln/contract/netboot"
)

// Slot names one of the two root slots.
type Slot string

const (
	A Slot = "a"
	B Slot = "b"
)

// Slots lists both slots.
var Slots = []Slot{A, B}

// ParseSlot reads a slot's name as the record and the command line spell it.
func ParseSlot(s string) (Slot, error) {
	switch Slot(s) {
	case A, B:
		return Slot(s), nil
	}
	return "", fmt.Errorf("slot %q is neither %q nor %q", s, A, B)
}

// Other is the slot that is not s.
func (s Slot) Other() Slot {
	if s == A {
		return B
	}
	return A
}

// PartLabel is the GPT partition label of the slot's root squashfs.
func (s Slot) PartLabel() string {
	return layout.RootPartLabel + "-" + strings.ToUpper(string(s))
}

// Kernel and Initrd are the slot's boot files on the ESP.
func (s Slot) Kernel() string { return "/kiln/" + string(s) + "/vmlinuz" }
func (s Slot) Initrd() string { return "/kiln/" + string(s) + "/initrd.img" }

// Root is the slot's root= argument.
func (s Slot) Root() string { return "live:PARTLABEL=" + s.PartLabel() }

// Cmdline is the kernel command line that boots slot s, before the image
// spec's extra arguments. panic= reboots a kernel that panics (a root it
// cannot mount, say), so a trying boot that dies that way comes back on
// the active slot.
func Cmdline(s Slot) []string {
	args := append([]string{"root=" + s.Root()}, netboot.BaseCmdline...)
	return append(args, PanicArg, SlotArg+"="+string(s))
}

// PanicArg makes the kernel reboot 10 s after a panic.
const PanicArg = "panic=10"

// EnvPath is the record's file on the ESP, a BlockSize GRUB environment
// block that must exist before GRUB first boots: save_env rewrites a file
// in place and never creates one.
const EnvPath = "/kiln/grubenv"

// SlotArg is the kernel argument GRUB passes to name the slot it booted:
// kiln.slot=a or kiln.slot=b.
const SlotArg = "kiln.slot"

// BootedSlot returns the slot SlotArg names on the kernel command line
// cmdline (/proc/cmdline); the last one counts, as for any kernel
// argument.
func BootedSlot(cmdline string) (Slot, error) {
	value, found := "", false
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, SlotArg+"="); ok {
			value, found = v, true
		}
	}
	if !found {
		return "", fmt.Errorf("no %s= on the kernel command line", SlotArg)
	}
	s, err := ParseSlot(value)
	if err != nil {
		return "", fmt.Errorf("%s=: %w", SlotArg, err)
	}
	return s, nil
}
