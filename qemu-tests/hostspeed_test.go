package qemutests

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/kiln-project/kiln/qemu-tests/cluster"
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

// topologyFor is make test's cluster scenario on a host whose plain boot
// took floor: three machines, or on a slow host two.
func topologyFor(floor time.Duration) cluster.Topology {
	if floor > slowHostFloor {
		return cluster.TwoNodes()
	}
	return cluster.ThreeNodes()
}

// plainBootLine is the console line a plain boot ends at.
var plainBootLine = regexp.MustCompile(`login: `)

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
		MemoryMiB: 3072, CPUs: 1, ISO: filepath.Join(out, "node.iso"), KernelArgs: []string{"systemd.mask=kiln-firstboot.service"}})
	defer v.PowerCut()
	if _, err := v.WaitLine(context.Background(), plainBootLine, 5*time.Minute); err != nil {
		t.Fatalf("the plain boot that measures the host: %v", err)
	}
	for _, l := range v.Console() {
		if plainBootLine.MatchString(l.Text) {
			return l.At
		}
	}
	return v.Uptime()
}

// Hosts up to the bound get the three machines (two masters), slower
// ones the two-node site.
func TestTopologyForHostSpeed(t *testing.T) {
	for _, tc := range []struct {
		floor   time.Duration
		masters []string
	}{
		{26 * time.Second, []string{"m1", "m2"}},
		{slowHostFloor, []string{"m1", "m2"}},
		{slowHostFloor + time.Second, []string{"m1"}},
		{75 * time.Second, []string{"m1"}},
	} {
		var got []string
		for _, m := range topologyFor(tc.floor).Masters() {
			got = append(got, m.Name)
		}
		if !slices.Equal(got, tc.masters) {
			t.Errorf("plain boot %s: masters %v, want %v", tc.floor, got, tc.masters)
		}
	}
}
