package bootslot

import (
	"errors"
	"fmt"
	"strings"
)

// A slot's extra kernel arguments (its image spec's kernel.cmdline) go
// with its image: Slot.Args() on the ESP is written with the slot's
// kernel and initrd, a GRUB script fragment that sets argsVar, and
// Script passes them after Cmdline. A slot without the file boots with
// the arguments Script was made with: the built image's.

const argsVar = "kiln_args"

// Args is the slot's arguments file on the ESP.
func (s Slot) Args() string { return "/kiln/" + string(s) + "/args.cfg" }

// MaxArgsBytes bounds a slot's extra arguments, joined by spaces: the
// kernel's command line is 2048 bytes in all.
const MaxArgsBytes = 1024

// CheckArg refuses an argument that GRUB and iPXE would not pass on as it
// is: an empty one, one with whitespace (it would be two), a control or
// non-ASCII byte, or a single quote (the arguments are single-quoted in
// GRUB's script).
func CheckArg(arg string) error {
	if arg == "" {
		return errors.New("an empty argument")
	}
	for _, c := range []byte(arg) {
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			return fmt.Errorf("%q holds whitespace: one argument each", arg)
		case c < 0x21 || c > 0x7e:
			return fmt.Errorf("%q holds the byte %#x: printable ASCII only", arg, c)
		case c == '\'':
			return fmt.Errorf("%q holds a single quote", arg)
		}
	}
	return nil
}

// CheckArgs checks each argument and their length.
func CheckArgs(args []string) error {
	for i, a := range args {
		if err := CheckArg(a); err != nil {
			return fmt.Errorf("argument %d: %w", i, err)
		}
	}
	if n := len(strings.Join(args, " ")); n > MaxArgsBytes {
		return fmt.Errorf("%d bytes of arguments, more than %d", n, MaxArgsBytes)
	}
	return nil
}

// EncodeArgs is the content of a slot's Args() file for args.
func EncodeArgs(args []string) ([]byte, error) {
	if err := CheckArgs(args); err != nil {
		return nil, err
	}
	return []byte(setArgs(args)), nil
}

// setArgs is the GRUB command that sets argsVar to args, which CheckArgs
// accepted.
func setArgs(args []string) string {
	return fmt.Sprintf("set %s='%s'\n", argsVar, strings.Join(args, " "))
}
