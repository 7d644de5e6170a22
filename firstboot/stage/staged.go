package stage

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/contract/upgradeask"
	"github.com/kiln-project/kiln/internal/atomicfile"
)

// Staged is the request a stage of Slot with the image Version answers,
// kept on the state partition (layout.UpgradeStagedPath): after a reboot
// onto Slot rolls back, the node answers kiln.dev/upgrade-rolled-back
// with Request when Slot and Version are the rolled-back slot's.
type Staged struct {
	Request string        `json:"request"`
	Slot    bootslot.Slot `json:"slot"`
	Version string        `json:"version"`
}

func (s Staged) validate() error {
	if _, err := upgradeask.EncodeStaged(s.Request); err != nil {
		return err
	}
	if _, err := bootslot.ParseSlot(string(s.Slot)); err != nil {
		return fmt.Errorf("slot: %w", err)
	}
	if s.Version == "" {
		return errors.New("no image version")
	}
	return nil
}

// WriteStaged replaces the file at path with st, synced.
func WriteStaged(path string, st Staged) error {
	if err := st.validate(); err != nil {
		return fmt.Errorf("recording the staged request in %s: %w", path, err)
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, append(b, '\n'), 0o600, nil); err != nil {
		return fmt.Errorf("recording the staged request: %w", err)
	}
	return nil
}

// ReadStaged reads what WriteStaged wrote at path; with no file the
// error wraps fs.ErrNotExist.
func ReadStaged(path string) (Staged, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Staged{}, fmt.Errorf("reading the staged request: %w", err)
	}
	var st Staged
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&st); err != nil {
		return Staged{}, fmt.Errorf("reading the staged request %s: %w", path, err)
	}
	if err := st.validate(); err != nil {
		return Staged{}, fmt.Errorf("reading the staged request %s: %w", path, err)
	}
	return st, nil
}
