package vm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// KVMUsable reports whether QEMU can run guests under KVM here. Opening
// /dev/kvm is not enough: on some nested hosts KVM fails on the
// boot loader's code ("KVM internal error ... emulation failure") and the
// guest hangs. So a firmware-only VM is run briefly under KVM and must
// get as far as SeaBIOS's boot attempt, with the CPU model the VMs get
// (on this nested host "-cpu host" aborts QEMU on an MSR write). Then,
// when the image's kernel is at hand (ProbeKernel), it is booted under
// KVM and must print its banner: a PVM host's KVM (kvm-pvm, no VMX)
// runs SeaBIOS and the kernel's real-mode setup, and then spins at 100%
// of a core with nothing more on the console, because it runs only
// kernels built as PVM guests. When a VM still hits a KVM error, WaitLine
// reruns that boot under TCG and marks KVM broken. KILN_ACCEL=tcg or
// KILN_ACCEL=kvm overrides the probe. The answer is computed once, and
// a KVM refused is said once on stderr.
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
	// SeaBIOS logs its boot attempts on the debug port; with no disk it
	// reaches "No bootable device" within a second under KVM.
	debug := filepath.Join(dir, "seabios.log")
	if !probeRun(10*time.Second, debug, []string{"Booting from", "No bootable device"},
		"-chardev", "file,id=dbg,path="+debug, "-device", "isa-debugcon,iobase=0x402,chardev=dbg") {
		fmt.Fprintln(os.Stderr, "vm: /dev/kvm is there, but SeaBIOS did not get to its boot attempt under KVM within 10 s: VMs run under TCG")
		return false
	}
	kernel := ProbeKernel()
	if kernel == "" {
		return true
	}
	// The kernel's early console prints its banner within a second of
	// its start under KVM; it powers off at once through panic=-1 and no
	// root.
	serial := filepath.Join(dir, "serial.log")
	if !probeRun(kernelProbeBound, serial, []string{"Linux version"},
		"-serial", "file:"+serial, "-kernel", kernel, "-append", "console=ttyS0 earlyprintk=serial,ttyS0,115200 panic=-1") {
		fmt.Fprintf(os.Stderr, "vm: /dev/kvm is there, but the image's kernel (%s) printed no banner under KVM within %s (a PVM host's KVM runs only PVM guest kernels): VMs run under TCG\n", kernel, kernelProbeBound)
		return false
	}
	return true
}

// kernelProbeBound is how long the probe's kernel may take to print its
// banner under KVM.
const kernelProbeBound = 20 * time.Second

// ProbeKernel is the kernel the probe boots: the image's PXE kernel under
// KILN_OUT (the image every QEMU test and kiln-bench boot), or "" when
// there is none.
func ProbeKernel() string {
	out := os.Getenv("KILN_OUT")
	if out == "" {
		return ""
	}
	k := filepath.Join(out, "pxe", "vmlinuz")
	if _, err := os.Stat(k); err != nil {
		return ""
	}
	return k
}

// probeRun runs a small VM under KVM, with the CPU model the VMs get,
// until the file log holds one of signs (true) or bound passes (false).
func probeRun(bound time.Duration, log string, signs []string, args ...string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	base := []string{"-machine", "pc", "-accel", "kvm", "-cpu", "host", "-m", "128",
		"-display", "none", "-monitor", "none", "-nodefaults", "-no-reboot"}
	if !slices.Contains(args, "-serial") {
		base = append(base, "-serial", "none")
	}
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", append(base, args...)...)
	if err := cmd.Start(); err != nil {
		return false
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for ctx.Err() == nil {
		data, _ := os.ReadFile(log)
		for _, s := range signs {
			if bytes.Contains(data, []byte(s)) {
				return true
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return false
}
