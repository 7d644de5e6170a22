// Package vm runs kiln images in QEMU for tests: ISO (BIOS or UEFI), raw
// disk (UEFI) and PXE boots, an Ignition config through fw_cfg, the serial
// console captured to a file per boot (and recorded line by line with the
// time each line arrived), waits for console lines, power cuts and
// restarts with the same disks. KVM is used when /dev/kvm works,
// otherwise TCG.
package vm

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Firmware is what the VM boots with.
type Firmware int

// Firmwares.
const (
	BIOS Firmware = iota // SeaBIOS on the i440fx machine
	UEFI                 // OVMF on q35
)

func (f Firmware) String() string { return [...]string{"bios", "uefi"}[f] }

// Boot is the boot device.
type Boot int

// Boot devices.
const (
	BootISO  Boot = iota // the ISO as a CD
	BootDisk             // the first disk
	BootPXE              // the NIC, from QEMU's built-in TFTP server
)

// Host files QEMU needs (Debian's ovmf package).
const (
	OVMFCode = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	OVMFVars = "/usr/share/OVMF/OVMF_VARS_4M.fd"
)

// Config describes one VM.
type Config struct {
	Name     string
	Dir      string // per-VM files: console logs, NVRAM, the config
	Firmware Firmware
	Boot     Boot
	ISO      string
	Disks    []Disk
	Ignition []byte   // passed as fw_cfg opt/com.coreos/config; nil: none
	MAC      string   // the NIC's address; "" is QEMU's default 52:54:00:12:34:56
	HostFwd  []string // user-net forwards, e.g. tcp:127.0.0.1:16443-10.0.2.50:6443
	// PXE on the user network: QEMU serves TFTPDir over TFTP and its DHCP
	// answer names BootFile. PXE on a tap: the segment's DHCP server
	// (netns.ServeDHCP) names the boot file.
	TFTPDir  string
	BootFile string
	// Netns runs QEMU inside this network namespace (ip netns exec, which
	// execs QEMU: the process is QEMU's own). See package netns.
	Netns string
	// Tap puts the NIC on this tap device (in Netns, if set) instead of
	// QEMU's user network; HostFwd, TFTPDir and BootFile are the user
	// network's and cannot be combined with it.
	Tap       string
	MemoryMiB int
	CPUs      int
	KVM       bool
	// Kernel, Initrd and Append boot a kernel directly (QEMU -kernel),
	// bypassing the medium's boot loader but not its root filesystem.
	Kernel, Initrd, Append string
	// Direct boots an ISO (BootISO) through QEMU -kernel with the kernel,
	// initramfs and command line of the ISO's own boot entry, read from
	// the ISO when the VM starts, then KernelArgs, then under TCG
	// TCGKernelArgs: the firmware and the boot loader are skipped (the
	// boot tests cover them), the ISO stays attached as the live root.
	Direct     bool
	KernelArgs []string
}

// Disk is a disk image attached as virtio.
type Disk struct {
	Path   string
	Format string // raw or qcow2
}

// Args returns QEMU's command line for boot number n (console-n.log).
func (c Config) Args(n int) []string {
	// Under TCG the CPU model stays QEMU's default (qemu64) unless
	// KILN_QEMU_CPU names one: "max" emulates SHA and AES (Go's sha256
	// ran 18x faster in qemu-user), but in the three-VM runs with it the
	// one-vCPU worker's disk and CD-ROM stalled (hung tasks, ata
	// timeouts) on this 2-core host, so it is not the default.
	machine, accel, cpu := "pc", "tcg", os.Getenv("KILN_QEMU_CPU")
	if c.Firmware == UEFI {
		machine = "q35"
	}
	if c.KVM {
		accel, cpu = "kvm", "host"
	}
	args := []string{"-machine", machine, "-accel", accel}
	if cpu != "" {
		args = append(args, "-cpu", cpu)
	}
	args = append(args,
		"-m", strconv.Itoa(max(c.MemoryMiB, 512)), "-smp", strconv.Itoa(max(c.CPUs, 1)),
		"-display", "none", "-monitor", "none", "-no-reboot",
		"-serial", "file:"+c.ConsolePath(n))
	if c.Firmware == UEFI {
		args = append(args,
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+OVMFCode,
			"-drive", "if=pflash,format=raw,unit=1,file="+c.varsPath())
	}
	if c.Tap != "" {
		dev := "virtio-net-pci,netdev=net0"
		if c.MAC != "" {
			dev += ",mac=" + c.MAC
		}
		args = append(args, "-netdev", "tap,id=net0,ifname="+c.Tap+",script=no,downscript=no", "-device", dev)
	} else {
		nic := "user,model=virtio-net-pci"
		if c.Boot == BootPXE {
			nic += ",tftp=" + c.TFTPDir + ",bootfile=" + c.BootFile
		}
		if c.MAC != "" {
			nic += ",mac=" + c.MAC
		}
		for _, f := range c.HostFwd {
			nic += ",hostfwd=" + f
		}
		args = append(args, "-nic", nic)
	}
	for _, d := range c.Disks {
		args = append(args, "-drive", fmt.Sprintf("file=%s,format=%s,if=virtio,cache=unsafe", d.Path, d.Format))
	}
	switch c.Boot {
	case BootISO:
		args = append(args, "-drive", "file="+c.ISO+",media=cdrom,readonly=on", "-boot", "d")
	case BootDisk:
		args = append(args, "-boot", "c")
	case BootPXE:
		args = append(args, "-boot", "n")
		if c.Firmware == BIOS {
			// SeaBIOS copies its text screen to the serial port (its
			// sercon), so iPXE's lines reach the console log.
			args = append(args, "-fw_cfg", "name=etc/sercon-port,file="+c.serconPath())
		}
	}
	if c.Kernel != "" {
		args = append(args, "-kernel", c.Kernel, "-initrd", c.Initrd, "-append", c.Append)
	}
	if c.Ignition != nil {
		args = append(args, "-fw_cfg", "name=opt/com.coreos/config,file="+c.ignitionPath())
	}
	return args
}

// Check rejects configs QEMU would run differently from what they say:
// the user network's features on a tap NIC.
func (c Config) Check() error {
	if c.Direct && (c.Boot != BootISO || c.ISO == "" || c.Kernel != "") {
		return fmt.Errorf("VM %s: a direct boot boots an ISO's own kernel: it needs BootISO and an ISO, and no Kernel of its own", c.Name)
	}
	if c.Tap == "" {
		return nil
	}
	switch {
	case len(c.HostFwd) > 0:
		return fmt.Errorf("VM %s: HostFwd %v needs QEMU's user network, but the NIC is on tap %s", c.Name, c.HostFwd, c.Tap)
	case c.TFTPDir != "" || c.BootFile != "":
		return fmt.Errorf("VM %s: PXE from QEMU's TFTP server needs the user network, but the NIC is on tap %s (the segment's DHCP names the boot file there)", c.Name, c.Tap)
	}
	return nil
}

// Command returns the program and arguments that run boot n: QEMU, or
// ip netns exec wrapping it when Netns is set.
func (c Config) Command(n int) (string, []string) {
	if c.Netns == "" {
		return "qemu-system-x86_64", c.Args(n)
	}
	return "ip", append([]string{"netns", "exec", c.Netns, "qemu-system-x86_64"}, c.Args(n)...)
}

// ConsolePath is where boot n's serial console is captured.
func (c Config) ConsolePath(n int) string {
	return filepath.Join(c.Dir, fmt.Sprintf("console-%d.log", n))
}

func (c Config) varsPath() string     { return filepath.Join(c.Dir, "OVMF_VARS.fd") }
func (c Config) ignitionPath() string { return filepath.Join(c.Dir, "config.ign") }
func (c Config) serconPath() string   { return filepath.Join(c.Dir, "sercon-port") }

// serconPort is SeaBIOS's etc/sercon-port: the serial port's I/O address
// (COM1, 0x3f8) as a little-endian 16-bit integer.
var serconPort = []byte{0xf8, 0x03}
