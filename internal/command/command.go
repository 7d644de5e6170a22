// Package command owns how kiln's node-side code runs a program: the one
// Runner interface the agent, the roles, kiln-leave, the image import and
// the image seed take (so their tests hand them fakes), and Host, which
// runs the program on this machine.
package command

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Runner runs a program and returns its combined output; on failure the
// error names the command line.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// Host runs programs on this machine.
type Host struct{}

// Run runs name with args until it exits or ctx ends; on failure the
// error carries the command line and its output.
func (Host) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}
