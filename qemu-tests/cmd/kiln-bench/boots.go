package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/kiln-project/kiln/builder"
	"github.com/kiln-project/kiln/firstboot/source"
	"github.com/kiln-project/kiln/images"
	"github.com/kiln-project/kiln/internal/ignition"
	"github.com/kiln-project/kiln/qemu-tests/console"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

// doneLine is the console line a boot with the agent is timed to; a
// plain boot ends at vm.LoginPrompt.
var doneLine = regexp.MustCompile(`kiln-firstboot: done source=`)

// benchConfig is a small config: one file and the hostname, so the figure
// is the agent's own cost, not that of what a config asks for.
var benchConfig = map[string]any{
	"ignition": map[string]any{"version": "3.4.0"},
	"storage": map[string]any{"files": []any{
		map[string]any{"path": "/etc/hostname", "contents": map[string]any{"source": "data:,kiln-bench%0A"}},
		map[string]any{"path": "/etc/kiln-bench", "mode": 0o644, "contents": map[string]any{"source": "data:,1"}},
	}},
}

// bootPath is one way to boot the image: how to start it with the agent
// and a config, and how to start the same image plain, agent masked.
type bootPath struct {
	name  string
	floor string // how the floor boot differs
	setup func(o options, dir string, plain bool) (vm.Config, func(), error)
}

func bootPaths() []bootPath {
	return []bootPath{
		{"ISO, SeaBIOS", "direct kernel boot of the same ISO, agent masked", isoBoot(vm.BIOS)},
		{"ISO, OVMF", "direct kernel boot of the same ISO, agent masked", isoBoot(vm.UEFI)},
		{"raw disk, OVMF", "direct kernel boot of the same disk, agent masked", rawBoot},
		{"PXE, SeaBIOS + iPXE", "the same PXE boot, agent masked", pxeBoot(vm.BIOS)},
		{"PXE, OVMF + iPXE", "the same PXE boot, agent masked", pxeBoot(vm.UEFI)},
		{"PXE through kiln serve, SeaBIOS + iPXE", "the plain PXE boot (QEMU's TFTP, a plain file server), agent masked", serveBoot},
	}
}

// benchBoots times power-on to the agent's done line on every boot path,
// each beside the same image's plain boot (agent masked) to the serial
// login prompt.
func benchBoots(ctx context.Context, o options, work string, r *report) error {
	head := [3]string{"boot path", "power-on to `done`", "floor: plain boot to the login prompt"}
	for _, p := range bootPaths() {
		if !strings.Contains(p.name, o.bootPaths) {
			continue
		}
		dir := filepath.Join(work, "boot", regexp.MustCompile(`\W+`).ReplaceAllString(p.name, "-"))
		fmt.Fprintf(os.Stderr, "== boot: %s\n", p.name)
		done, err := timeBoot(ctx, o, filepath.Join(dir, "agent"), p, false, doneLine)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		fmt.Fprintf(os.Stderr, "== boot: %s, plain\n", p.name)
		floor, err := timeBoot(ctx, o, filepath.Join(dir, "plain"), p, true, vm.LoginPrompt)
		if err != nil {
			return fmt.Errorf("%s, plain: %w", p.name, err)
		}
		r.add("Boot (power-on to line on the serial console)", head, row{p.name, secs(done.took), secs(floor.took), "floor: " + p.floor})
		r.addTimeline("boots", "Boot timelines: each boot path beside its plain boot",
			stepsRow(p.name, done.console), floorRow(p.name+", agent masked", floor.console))
	}
	return nil
}

// timedBoot is a boot timed from power-on to a console line, with its
// console up to then.
type timedBoot struct {
	took    time.Duration
	console []console.Line
}

func timeBoot(ctx context.Context, o options, dir string, p bootPath, plain bool, want *regexp.Regexp) (timedBoot, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return timedBoot{}, err
	}
	cfg, cleanup, err := p.setup(o, dir, plain)
	if err != nil {
		return timedBoot{}, err
	}
	defer cleanup()
	cfg.Name, cfg.Dir, cfg.KVM = filepath.Base(dir), dir, vm.KVMUsable()
	if cfg.CPUs == 0 { // a shape the setup chose (withShape) stands
		cfg.CPUs = 2
	}
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = 1536
	}
	v, err := vm.Start(cfg)
	if err != nil {
		return timedBoot{}, err
	}
	defer v.PowerCut()
	if _, err := v.WaitLine(ctx, want, 8*time.Minute); err != nil {
		return timedBoot{}, fmt.Errorf("%w (console: %s)", err, v.ConsolePath(v.Boot()))
	}
	return timedBoot{took: v.Uptime(), console: v.Console()}, nil
}

// fasterPlainBoot boots p plainly n times to the login prompt and returns
// the fastest: under TCG one plain boot varies by tens of seconds from
// run to run, and a slow floor flatters every ratio beside it.
func fasterPlainBoot(ctx context.Context, o options, dir, part string, p bootPath, n int) (timedBoot, error) {
	var floor timedBoot
	for i := range n {
		fmt.Fprintf(os.Stderr, "== %s: plain boot floor (%d of %d)\n", part, i+1, n)
		b, err := timeBoot(ctx, o, filepath.Join(dir, fmt.Sprintf("plain-%d", i+1)), p, true, vm.LoginPrompt)
		if err != nil {
			return timedBoot{}, err
		}
		fmt.Fprintf(os.Stderr, "== %s: plain boot to the login prompt in %.1f s\n", part, b.took.Seconds())
		if i == 0 || b.took < floor.took {
			floor = b
		}
	}
	return floor, nil
}

func nothing() {}

// scenarioPlain is the floor of the genesis and cluster parts: the ISO
// booted as their VMs boot it (vm.Config.Direct: the ISO's own kernel,
// initramfs and command line, with the harness's TCG arguments), the
// agent masked.
func scenarioPlain(o options, _ string, _ bool) (vm.Config, func(), error) {
	return vm.Config{Firmware: vm.BIOS, Boot: vm.BootISO, Direct: true, ISO: abs(filepath.Join(o.out, "node.iso")),
		KernelArgs: []string{vm.MaskAgent}}, nothing, nil
}

func isoBoot(fw vm.Firmware) func(options, string, bool) (vm.Config, func(), error) {
	return func(o options, _ string, plain bool) (vm.Config, func(), error) {
		cfg := vm.Config{Firmware: fw, Boot: vm.BootISO, ISO: abs(filepath.Join(o.out, "node.iso"))}
		cfg, err := agentOrPlain(o, cfg, builder.ISOCmdline, plain)
		return cfg, nothing, err
	}
}

// agentOrPlain gives cfg the bench config, or for the plain boot the
// image's kernel booted directly, with the image's own boot entry's
// command line (the builder's, with the default spec's arguments) and
// the agent masked.
func agentOrPlain(o options, cfg vm.Config, cmdline func(extra []string) string, plain bool) (vm.Config, error) {
	if plain {
		spec, err := images.Load("")
		if err != nil {
			return cfg, err
		}
		pxe := abs(filepath.Join(o.out, "pxe"))
		cfg.Kernel, cfg.Initrd = filepath.Join(pxe, "vmlinuz"), filepath.Join(pxe, "initrd.img")
		cfg.Append = cmdline(append(spec.Kernel.Cmdline, vm.MaskAgent))
		return cfg, nil
	}
	ign, err := json.Marshal(benchConfig)
	cfg.Ignition = ign
	return cfg, err
}

func rawBoot(o options, dir string, plain bool) (vm.Config, func(), error) {
	disk := filepath.Join(dir, "node.raw")
	if err := copyDisk(filepath.Join(o.out, "node.raw"), disk, "3G"); err != nil {
		return vm.Config{}, nil, err
	}
	cleanup := func() { os.Remove(disk) }
	cfg := vm.Config{Firmware: vm.UEFI, Boot: vm.BootDisk, Disks: []vm.Disk{{Path: disk, Format: "raw"}}}
	cfg, err := agentOrPlain(o, cfg, builder.RawCmdline, plain)
	return cfg, cleanup, err
}

// copyDisk copies a raw disk image sparsely and grows the copy to size,
// the room its first boot makes its state partition in.
func copyDisk(src, dst, size string) error {
	if out, err := exec.Command("cp", "--sparse=always", src, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("copying %s: %v: %s", src, err, out)
	}
	if out, err := exec.Command("qemu-img", "resize", "-q", "-f", "raw", dst, size).CombinedOutput(); err != nil {
		return fmt.Errorf("resizing %s to %s: %v: %s", dst, size, err, out)
	}
	return nil
}

func pxeBoot(fw vm.Firmware) func(options, string, bool) (vm.Config, func(), error) {
	return func(o options, dir string, plain bool) (vm.Config, func(), error) {
		ign, err := json.Marshal(benchConfig)
		if err != nil {
			return vm.Config{}, nil, err
		}
		srv, err := vm.ServePXE(abs(filepath.Join(o.out, "pxe")), dir, map[string][]byte{"config.ign": ign}, func(p *vm.PXEServer) string {
			if plain {
				return vm.MaskAgent
			}
			return "ignition.config.url=" + p.GuestURL("config.ign") + " " + source.HashArg + "=" + ignition.Hash(ign)
		})
		if err != nil {
			return vm.Config{}, nil, err
		}
		return vm.Config{Firmware: fw, Boot: vm.BootPXE, TFTPDir: srv.TFTPDir, BootFile: srv.BootFile, MemoryMiB: 2048}, srv.Close, nil
	}
}
