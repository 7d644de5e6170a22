package vm

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// KVMUsable reports whether QEMU can run guests under KVM here. Opening
// /dev/kvm is not enough: on some nested hosts KVM fails on the
// boot loader's code ("KVM internal error ... emulation failure") and the
// guest hangs. So a firmware-only VM is run briefly under KVM and must
// get as far as SeaBIOS's boot attempt, with the CPU model the VMs get
// (on this nested host "-cpu host" aborts QEMU on an MSR write); and when a VM still hits a KVM
// error, WaitLine reruns that boot under TCG and marks KVM broken. KILN_ACCEL=tcg
// or KILN_ACCEL=kvm overrides the probe. The answer is computed once.
func KVMUsable() bool {
	kvmOnce.Do(func() { kvmOK.Store(probeKVM()) })
	return kvmOK.Load()
}

// The probe's answer; VMs of parallel tests read and mark it.
var (
	kvmOnce sync.Once
	kvmOK   atomic.Bool
)

// markKVMBroken makes KVMUsable answer false from now on.
func markKVMBroken() {
	kvmOnce.Do(func() {})
	kvmOK.Store(false)
}

func probeKVM() bool {
	switch os.Getenv("KILN_ACCEL") {
	case "tcg":
		return false
	case "kvm":
		return true
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	f.Close()
	dir, err := os.MkdirTemp("", "kiln-kvm-probe-")
	if err != nil {
		return false
	}
	defer os.RemoveAll(dir)
	debug := filepath.Join(dir, "seabios.log")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", "-machine", "pc", "-accel", "kvm", "-cpu", "host", "-m", "64",
		"-display", "none", "-monitor", "none", "-serial", "none", "-nodefaults", "-no-reboot",
		"-chardev", "file,id=dbg,path="+debug, "-device", "isa-debugcon,iobase=0x402,chardev=dbg")
	if err := cmd.Start(); err != nil {
		return false
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for ctx.Err() == nil {
		// SeaBIOS logs its boot attempts on the debug port; with no disk
		// it reaches "No bootable device" within a second under KVM.
		if log, _ := os.ReadFile(debug); bytes.Contains(log, []byte("Booting from")) || bytes.Contains(log, []byte("No bootable device")) {
			return true
		}
		time.Sleep(200 * time.Millisecond)
	}
	return false
}
