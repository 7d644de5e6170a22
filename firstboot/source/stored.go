package source

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/kiln-project/kiln/internal/ignition"
)

// SetAside is a stored config that a pinned boot does not use: its hash
// is not kiln.config.hash=. Whoever can write the state partition (a
// planted drive, a forged ownership record) can put any config there;
// the pin is what the operator asked for.
type SetAside struct {
	Stored string // the stored config's digest, in the pin's algorithm
	Pin    string // kiln.config.hash=
}

func (s *SetAside) String() string {
	return fmt.Sprintf("stored config %s does not match %s %s", s.Stored, HashArg, s.Pin)
}

// SetAsideError is the state source's answer when it is asked for a
// stored config that a pin sets aside, by a caller that did not set it
// aside first (Choose does).
type SetAsideError struct{ SetAside }

func (e *SetAsideError) Error() string { return e.String() + ": not using it" }

// Verified reports whether the config of the named source was checked
// against kiln.config.hash= on a pinned boot. The embedded config and
// fw_cfg are trusted as they are (the image's, the hypervisor's).
func Verified(name string) bool { return name == URL || name == ConfigDrive }

// checkStored decides, on a pinned boot, whether the stored config may
// be used: only when the config itself hashes to the pin. The hash
// recorded beside it is not trusted for this (it sits on the same
// partition); a stored config without one is checked the same way. It
// reads nothing when the state partition is not mounted or nothing pins
// the config.
func (e Env) checkStored() (*SetAside, error) {
	if !e.StateMounted {
		return nil, nil
	}
	pin := CmdlineArg(e.Cmdline, HashArg)
	if pin == "" {
		return nil, nil
	}
	if err := ignition.CheckHashSpec(pin); err != nil {
		return nil, fmt.Errorf("kernel argument %s=: %w", HashArg, err)
	}
	data, err := os.ReadFile(e.path(StateConfigPath))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, err
	}
	if ignition.VerifyHash(data, pin, "the stored config") == nil {
		return nil, nil
	}
	got, err := ignition.HashLike(data, pin)
	if err != nil {
		return nil, err
	}
	return &SetAside{Stored: got, Pin: pin}, nil
}

// stored is the state source: the stored config, unless a pin sets it
// aside.
func (e Env) stored(ctx context.Context) ([]byte, error) {
	aside, err := e.checkStored()
	if err != nil {
		return nil, err
	}
	if aside != nil {
		return nil, &SetAsideError{*aside}
	}
	return fileSource(e.path(StateConfigPath))(ctx)
}
