// Package ignition parses and validates an Ignition config (spec 3.0 to
// 3.5) into 3.5 types, rejecting the parts kiln does not apply and the
// users and groups a config both deletes and uses. The node
// agent (firstboot/ignite) applies what it returns; kiln gen checks every
// config it renders with it.
package ignition

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	v3 "github.com/coreos/ignition/v2/config/v3_5"
	"github.com/coreos/ignition/v2/config/v3_5/types"
)

// StateLabel names the node's state partition and its filesystem
// (docs/architecture.md): the one part of storage.disks and
// storage.filesystems kiln applies.
const StateLabel = "KILN-STATE"

// StateMountPoint is where the node agent mounts the state filesystem,
// which a config's filesystems cannot move.
const StateMountPoint = "/var/lib/kiln-state"

// StateDevice is how a config names the state filesystem's device.
const StateDevice = "/dev/disk/by-partlabel/" + StateLabel

// InvalidError is a config that does not parse or validate. Report holds
// one line per problem, each with its field path.
type InvalidError struct {
	Report []string
	Err    error
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("invalid Ignition config: %v (%d problem(s) in the report)", e.Err, len(e.Report))
}

func (e *InvalidError) Unwrap() error { return e.Err }

// Parse validates raw as an Ignition config of any spec from 3.0 to 3.5
// and returns it translated to 3.5. Warnings are returned too.
func Parse(raw []byte) (types.Config, []string, error) {
	cfg, rpt, err := v3.ParseCompatibleVersion(raw)
	var lines []string
	for _, e := range rpt.Entries {
		lines = append(lines, e.String())
	}
	// Ignition reports unused keys in map order: sorted, the same config
	// prints the same report on every boot.
	slices.Sort(lines)
	if err == nil && rpt.IsFatal() {
		err = errors.New("the config has errors")
	}
	if err != nil {
		return types.Config{}, lines, &InvalidError{Report: lines, Err: err}
	}
	if problems := append(unsupported(cfg), deletions(cfg)...); len(problems) > 0 {
		lines = append(lines, problems...)
		return types.Config{}, lines, &InvalidError{Report: lines, Err: errors.New(strings.Join(problems, "; "))}
	}
	return cfg, lines, nil
}
