package qemutests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/qemu-tests/timeline"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

// slowHostFloor is the plain boot beyond which make test's cluster
// scenario runs with one master instead of two. Two masters each keep
// most of a one-vCPU TCG guest busy once settled (the kubelet, the
// apiserver and etcd about a fifth of it each on a host whose plain boot
// takes 25-30 s), so on a host about twice as slow the two masters need
// more than its two cores and the scenario collapses after the second
// etcd member joins (CI runs of 2026-11-28 to 2026-12-01, whose genesis
// agents started at 70-90 s). The three-VM scenario passed on hosts
// whose floor was 26-40 s.
const slowHostFloor = 50 * time.Second

// slowHost says why a host whose plain boot took floor is too slow for
// make test's three-VM scenario, or "" when it is not.
func slowHost(floor time.Duration) string {
	if floor <= slowHostFloor {
		return ""
	}
	return fmt.Sprintf("a plain boot of %.1f s is beyond %s, where two one-vCPU masters need more than the host's two cores", floor.Seconds(), slowHostFloor)
}

// plainBoot boots the image as the cluster's machines boot it (the ISO's
// kernel directly, one vCPU, a master's memory) with the agent masked,
// and returns its power-on to the login prompt: the host's speed for
// this work, measured the way make bench measures its floors. Its
// console is kept under qemu-logs/host-speed.
func plainBoot(t *testing.T, out string) time.Duration {
	t.Helper()
	dir := filepath.Join(out, "qemu-logs", "host-speed")
	os.RemoveAll(dir)
	v := startVM(t, vm.Config{Name: "plain", Dir: dir, Firmware: vm.BIOS, Boot: vm.BootISO, Direct: true,
		MemoryMiB: 3072, CPUs: 1, ISO: filepath.Join(out, "node.iso"), KernelArgs: []string{vm.MaskAgent}})
	defer v.PowerCut() // the scenario gets the cores; startVM's cleanup stays
	if _, err := v.WaitLine(context.Background(), vm.LoginPrompt, 5*time.Minute); err != nil {
		t.Fatalf("the plain boot that measures the host: %v", err)
	}
	marks := timeline.Extract([]timeline.Step{{Name: "login prompt", Line: vm.LoginPrompt}}, v.Console())
	if len(marks) == 0 { // the prompt, unended, not yet read back as a line
		return v.Uptime()
	}
	return marks[0].At
}

// Hosts up to the bound run the three machines; slower ones are told
// why not, with the figure and the bound.
func TestSlowHost(t *testing.T) {
	for _, tc := range []struct {
		floor time.Duration
		want  string
	}{
		{26 * time.Second, ""},
		{slowHostFloor, ""},
		{slowHostFloor + time.Second, "a plain boot of 51.0 s is beyond 50s, where two one-vCPU masters need more than the host's two cores"},
		{75 * time.Second, "a plain boot of 75.0 s is beyond 50s"},
	} {
		if got := slowHost(tc.floor); !strings.HasPrefix(got, tc.want) || (tc.want == "") != (got == "") {
			t.Errorf("plain boot %s: %q, want %q", tc.floor, got, tc.want)
		}
	}
}
