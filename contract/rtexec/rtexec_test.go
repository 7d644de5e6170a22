package rtexec_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/builder/gobuild"
	"github.com/kiln-project/kiln/contract/rtexec"
)

// buildHelper compiles rt-exec the way the image builder does: its
// gobuild target, into a cache of the test's own.
func buildHelper(t *testing.T) string {
	t.Helper()
	bins, err := gobuild.Builder{CacheDir: t.TempDir()}.Build(context.Background(), gobuild.RTExecTarget())
	if err != nil {
		t.Fatalf("building rt-exec: %v", err)
	}
	return bins["rt-exec"]
}

// The program rt-exec starts, and the processes it starts in turn, run
// under SCHED_RR; where the policy cannot be set the program still runs,
// at its normal priority, and rt-exec says why.
func TestRTExecRunsTheProgramRoundRobin(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setting SCHED_RR needs root (CAP_SYS_NICE)")
	}
	bin := buildHelper(t)
	// policy of the shell itself, then of a child it starts (field 41 of
	// /proc/<pid>/stat is the policy: 0 normal, 2 SCHED_RR)
	script := `cut -d' ' -f41 /proc/$$/stat; sh -c 'cut -d" " -f41 /proc/$$/stat'`
	for _, tc := range []struct {
		name       string
		args       []string
		wantCode   int
		wantOut    string
		wantStderr string
	}{
		{name: "the policy set and inherited", args: []string{"--", "sh", "-c", script},
			wantOut: "2\n2\n", wantStderr: "rt-exec: sh runs under SCHED_RR at priority 1"},
		{name: "a priority the kernel refuses: the program runs anyway", args: []string{"-priority", "100", "--", "sh", "-c", script},
			wantOut: "0\n0\n", wantStderr: "rt-exec: sh runs at its normal priority: SCHED_RR priority 100: invalid argument"},
		{name: "no such program", args: []string{"--", "kiln-no-such-program"}, wantCode: 127, wantStderr: `"kiln-no-such-program": executable file not found`},
		{name: "no program", args: []string{"--"}, wantCode: 2, wantStderr: "rt-exec: no program after --"},
		{name: "an unknown flag", args: []string{"-nice", "3", "--", "true"}, wantCode: 2, wantStderr: `rt-exec: unknown argument "-nice"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			code := 0
			if exit, ok := err.(*exec.ExitError); ok {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode || string(out) != tc.wantOut || !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr with %q",
					code, out, stderr.String(), tc.wantCode, tc.wantOut, tc.wantStderr)
			}
		})
	}
}

func TestCommand(t *testing.T) {
	got := strings.Join(rtexec.Command("etcd", "--config-file=/x"), " ")
	if want := rtexec.Path + " -priority 1 -- etcd --config-file=/x"; got != want {
		t.Errorf("Command = %q, want %q", got, want)
	}
}
