package builder

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

// Cmd is one external command the build runs.
type Cmd struct {
	Name   string
	Args   []string
	Dir    string
	Env    []string  // added to the build's environment
	Stdout io.Writer // nil: captured with stderr for error messages
}

// Runner runs external commands. The build uses it for every tool
// (debootstrap, apt, dracut, mksquashfs, grub, xorriso) so tests can
// replace it.
type Runner interface {
	Run(ctx context.Context, c Cmd) error
}

// ExecRunner runs commands on the host. Output is kept in a bounded tail so
// a failing tool's last lines land in the error.
type ExecRunner struct {
	Env []string // the environment every command starts from
}

// Run runs c and, on failure, returns an error naming the command with the
// tail of its output.
func (r ExecRunner) Run(ctx context.Context, c Cmd) error {
	cmd := exec.CommandContext(ctx, c.Name, c.Args...)
	cmd.Dir = c.Dir
	cmd.Env = append(append([]string(nil), r.Env...), c.Env...)
	tail := &tailBuffer{max: 8 << 10}
	cmd.Stdout, cmd.Stderr = tail, tail
	if c.Stdout != nil {
		cmd.Stdout = c.Stdout
	}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", c.Name, ctx.Err())
		}
		return fmt.Errorf("%s %s: %w\n%s", c.Name, strings.Join(firstN(c.Args, 6), " "), err, indent(tail.String()))
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf.Write(p)
	if over := t.buf.Len() - t.max; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return t.buf.String() }

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(append([]string(nil), s[:n]...), "...")
	}
	return s
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > 25 {
		lines = lines[len(lines)-25:]
	}
	return "    | " + strings.Join(lines, "\n    | ")
}
