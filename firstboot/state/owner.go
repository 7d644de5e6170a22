package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kiln-project/kiln/firstboot/machine"
	"github.com/kiln-project/kiln/internal/atomicfile"
)

// RecordFile, at the root of the state filesystem, names the machine
// that made it.
const RecordFile = "kiln-machine.json"

// AdoptArg is the kernel argument (AdoptArg=1) with which the operator
// lets the agent adopt a state filesystem that has no record: one made
// by a kiln from before the record, or whose record was lost.
const AdoptArg = "kiln.state.adopt"

// Machine tells which machine the agent runs on.
type Machine interface {
	Identity() (machine.ID, error)
}

// Ownership is how Mount found the state filesystem.
type Ownership int

const (
	// Owned: its record names this machine.
	Owned Ownership = iota
	// Adopted: it had no record and was taken for this machine (it is
	// new, or the operator asked for its adoption); now it names this
	// machine.
	Adopted
)

// ForeignError is a state filesystem that is not known to be this
// machine's: made by another one, with a record that cannot be read as
// one, or with no record at all and not adopted. It is left unmounted
// and untouched.
type ForeignError struct {
	Dev    string
	Reason string
	// Unrecorded: it has no record; AdoptArg=1 lets the agent take it.
	Unrecorded bool
}

func (e *ForeignError) Error() string {
	if e.Unrecorded {
		return fmt.Sprintf("the %s filesystem on %s has no %s: nothing says it is this machine's", Label, e.Dev, RecordFile)
	}
	return fmt.Sprintf("the %s filesystem on %s is not this machine's: %s", Label, e.Dev, e.Reason)
}

type record struct {
	Version int `json:"version"`
	machine.ID
}

// claim compares the mounted state filesystem's record with this machine,
// writing the record when there is none and takeUnrecorded says to.
func (m *Manager) claim(takeUnrecorded bool) (Ownership, error) {
	this, err := m.machine().Identity()
	if err != nil {
		return 0, fmt.Errorf("identifying this machine: %w", err)
	}
	path := m.path(filepath.Join(MountPoint, RecordFile))
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if !takeUnrecorded {
			return 0, &ForeignError{Unrecorded: true}
		}
		if this.Empty() {
			return 0, &ForeignError{Reason: "this machine has no product UUID and no NIC to record as its owner"}
		}
		if err := atomicfile.WriteFile(path, recordOf(this), 0o644, nil); err != nil {
			return 0, fmt.Errorf("recording this machine on the state partition: %w", err)
		}
		return Adopted, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the state partition's owner: %w", err)
	}
	owner, err := parseRecord(data)
	if err != nil {
		return 0, &ForeignError{Reason: fmt.Sprintf("its %s does not parse (%v), so its owner is unknown", RecordFile, err)}
	}
	if !machine.Same(owner, this) {
		return 0, &ForeignError{Reason: fmt.Sprintf("it was made by the machine with %s; this one has %s", owner, this)}
	}
	return Owned, nil
}

// parseRecord reads the machine a record names. The record comes from a
// disk that may have been made anywhere: its bytes decide nothing until
// they parse.
func parseRecord(data []byte) (machine.ID, error) {
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return machine.ID{}, err
	}
	return rec.ID, nil
}

// recordOf is the record of the machine this.
func recordOf(this machine.ID) []byte {
	rec, _ := json.MarshalIndent(record{Version: 1, ID: this}, "", "  ")
	return append(rec, '\n')
}

func (m *Manager) machine() Machine {
	if m.Machine != nil {
		return m.Machine
	}
	return machine.Sysfs{Root: m.Root}
}

func (m *Manager) unmount(ctx context.Context) error {
	if _, err := m.Sys.Run(ctx, "umount", m.path(MountPoint)); err != nil {
		return fmt.Errorf("unmounting %s: %w", MountPoint, err)
	}
	return nil
}
