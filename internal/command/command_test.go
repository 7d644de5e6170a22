package command

import (
	"context"
	"strings"
	"testing"
)

var _ Runner = Host{}

func TestHostRun(t *testing.T) {
	out, err := Host{}.Run(context.Background(), "sh", "-c", "echo hello")
	if err != nil || string(out) != "hello\n" {
		t.Fatalf("Run = %q, %v", out, err)
	}
	out, err = Host{}.Run(context.Background(), "sh", "-c", "echo broken >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "sh -c echo broken >&2; exit 3: exit status 3: broken") || string(out) != "broken\n" {
		t.Fatalf("Run = %q, %v; want the command line, its status and its output", out, err)
	}
}
