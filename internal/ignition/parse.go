// Package ignition parses and validates an Ignition config (spec 3.0 to
// 3.5) into 3.5 types, rejecting the parts kiln does not apply. The node
// agent (firstboot/ignite) applies what it returns; kiln gen checks every
// config it renders with it.
package ignition

import (
	"errors"
	"fmt"
	"strings"

	v3 "github.com/coreos/ignition/v2/config/v3_5"
	"github.com/coreos/ignition/v2/config/v3_5/types"
)

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
	if err == nil && rpt.IsFatal() {
		err = errors.New("the config has errors")
	}
	if err != nil {
		return types.Config{}, lines, &InvalidError{Report: lines, Err: err}
	}
	if err := unsupported(cfg); err != nil {
		return types.Config{}, lines, &InvalidError{Report: append(lines, err.Error()), Err: err}
	}
	return cfg, lines, nil
}

// unsupported rejects the parts of the spec kiln does not apply, rather
// than silently ignoring them.
func unsupported(c types.Config) error {
	var parts []string
	if len(c.Storage.Luks) > 0 {
		parts = append(parts, "storage.luks")
	}
	if len(c.Storage.Raid) > 0 {
		parts = append(parts, "storage.raid")
	}
	if len(c.KernelArguments.ShouldExist)+len(c.KernelArguments.ShouldNotExist) > 0 {
		parts = append(parts, "kernelArguments")
	}
	if len(parts) > 0 {
		return fmt.Errorf("kiln does not apply %s (the image is immutable; put this in the image spec)", strings.Join(parts, ", "))
	}
	return nil
}
