package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/clustercheck"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
	"github.com/kiln-project/kiln/qemu-tests/console"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

var genesisDone = regexp.MustCompile(`kiln-firstboot: done role=genesis`)

// benchGenesis times a genesis boot of the ISO (SeaBIOS, state on a
// blank disk) from power-on to the apiserver healthy and to the node
// Ready, as the host sees them through hostfwd; then pulls the plug and
// times power-on to Ready again with no config attached. The floor is
// the same ISO's plain boot to the login prompt, measured here too.
func benchGenesis(ctx context.Context, o options, work string, r *report) error {
	dir := filepath.Join(work, "genesis")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "== genesis: plain boot floor")
	floor, err := timeBoot(ctx, o, filepath.Join(dir, "plain"), bootPath{name: "ISO", setup: isoBoot(vm.BIOS)}, true, loginLine)
	if err != nil {
		return fmt.Errorf("genesis floor: %w", err)
	}
	cfgs, err := cluster.Configs(cluster.GenesisSite(false), filepath.Join(dir, "pki"))
	if err != nil {
		return err
	}
	disk := filepath.Join(dir, "state.qcow2")
	if err := createQcow2(disk, "8G"); err != nil {
		return fmt.Errorf("genesis state disk: %w", err)
	}
	port, err := cluster.FreePort()
	if err != nil {
		return err
	}
	v, err := vm.Start(vm.Config{Name: "genesis", Dir: dir, Firmware: vm.BIOS, Boot: vm.BootISO, MemoryMiB: 3072, CPUs: 2,
		KVM: vm.KVMUsable(), MAC: cluster.GenesisMAC, ISO: abs(filepath.Join(o.out, "node.iso")),
		Disks:   []vm.Disk{{Path: disk, Format: "qcow2"}},
		HostFwd: []string{fmt.Sprintf("tcp:127.0.0.1:%d-10.0.2.50:6443", port)}, Ignition: cfgs["g1"]})
	if err != nil {
		return err
	}
	defer v.PowerCut()
	kube, err := cluster.HostClient(cfgs["g1"], port)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "== genesis: first boot")
	healthy, ready, err := timeToReady(ctx, v, kube, time.Time{})
	if err != nil {
		return err
	}
	if _, err := v.WaitLine(ctx, genesisDone, 30*time.Minute); err != nil {
		return fmt.Errorf("genesis: %w (console: %s)", err, v.ConsolePath(v.Boot()))
	}
	done, first := v.Uptime(), v.Console()
	head := [3]string{"step", "time", "floor: plain boot of the same ISO to the login prompt"}
	title := "Genesis (ISO, SeaBIOS, 3 GiB, 2 vCPUs, TCG; host polls the apiserver through hostfwd every second)"
	r.add(title, head,
		row{"power-on to apiserver healthy (/readyz ok)", secs(healthy), secs(floor.took), ""},
		row{"power-on to node Ready", secs(ready), secs(floor.took), ""},
		row{"power-on to `done role=genesis` (add-ons applied, validation pod read back)", secs(done), secs(floor.took), ""})
	fmt.Fprintln(os.Stderr, "== genesis: power cut and boot with no config")
	v.PowerCut()
	v.Ignition = nil
	since := time.Now()
	if err := v.Restart(); err != nil {
		return err
	}
	healthy, ready, err = timeToReady(ctx, v, kube, since)
	if err != nil {
		return fmt.Errorf("after the power cut: %w", err)
	}
	r.add(title, head,
		row{"power cut: power-on to apiserver healthy", secs(healthy), secs(floor.took), "no config attached: the state partition's copy"},
		row{"power cut: power-on to node Ready again", secs(ready), secs(floor.took), "Ready from this boot's kubelet heartbeat"})
	r.addTimeline("genesis", "Genesis timeline (ISO, SeaBIOS, 3 GiB, 2 vCPUs)",
		floorRow("plain boot of the same ISO, agent masked", floor.console),
		stepsRow("first boot: bootstrap (config attached, blank disk)", first),
		stepsRow("after a power cut: restored (no config)", restoredConsole(ctx, v)))
	return nil
}

// restoredConsole is the console of the genesis boot after the power
// cut, up to its role's done line: the bench's figures end at Ready,
// the timeline at the role's end. Without that line within a few
// minutes the timeline ends at the last step seen.
func restoredConsole(ctx context.Context, v *vm.VM) []console.Line {
	if _, err := v.WaitLine(ctx, genesisDone, 5*time.Minute); err != nil {
		fmt.Fprintf(os.Stderr, "== genesis: the timeline after the power cut ends at its last step: %v\n", err)
	}
	return v.Console()
}

// timeToReady polls from the host until the apiserver is healthy and
// then until the node is Ready, returning both times since power-on.
func timeToReady(ctx context.Context, v *vm.VM, kube kubernetes.Interface, since time.Time) (healthy, ready time.Duration, err error) {
	poll := func(check func() error) (time.Duration, error) {
		deadline := time.Now().Add(30 * time.Minute)
		for {
			if err := check(); err == nil {
				return v.Uptime(), nil
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("not there after 30 min (console: %s)", v.ConsolePath(v.Boot()))
			}
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			time.Sleep(time.Second)
		}
	}
	if healthy, err = poll(func() error { return clustercheck.APIServerReady(ctx, kube) }); err != nil {
		return 0, 0, err
	}
	if !since.IsZero() {
		since = since.Add(-5 * time.Second)
	}
	ready, err = poll(func() error { return clustercheck.NodeReady(ctx, kube, "g1", since) })
	return healthy, ready, err
}
