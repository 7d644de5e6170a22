package vm

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/filesystem"
)

// TCGKernelArgs are added to a direct boot's command line under TCG.
//
// norandmaps: QEMU 7.2's TCG keys translated code by virtual address and
// physical page, so with address-space randomisation every process
// translates the shared libraries again, at its own addresses, and each
// physical page of libc or bash collects one translation per process.
// When such a page is freed (the initramfs's files, at switch-root) and
// then zeroed for a new allocation, QEMU invalidates those translations
// one store at a time, walking a list as long as their number on every
// removal: guests froze for 10-30 s in clear_page_rep, in a module's
// load, the framebuffer's, the agent's first heap or containerd's start.
// Without randomisation the processes share one translation: no freeze
// in 8 plain boots (3 of 14 froze with it) and the plain boot 22%
// faster (docs/measurements.md). The image's own boots keep it: only
// the harness's direct boots under TCG add it.
//
// modprobe.blacklist=kvm_intel,kvm_amd: QEMU's CPU model offers SVM, so
// udev loads KVM in every guest, the image's default for KubeVirt or
// Kata; under TCG a nested KVM is of no use, and its module load took
// seconds of a one-vCPU guest's boot in the cluster bench (agent and
// kubelet 5-8 s later than without it).
//
// tsc=nowatchdog: under TCG the TSC is the host's clock, but the kernel's
// clocksource watchdog compares it with the emulated HPET, and a vCPU
// the host deschedules between the two reads looks like a drifting TSC:
// a loaded cluster guest marked its TSC unstable 28 min in and fell back
// to the HPET. Every clock read is then a system call and an emulated
// device access: time.Now took 13-15 us on the HPET or the ACPI timer
// against 1.1-1.8 us on the TSC in a one-vCPU guest of this kernel, and
// a goroutine ping-pong, which reads the clock at every switch, took
// 1.7-2.3x as long. A guest made slower by load then gets slower still.
// The TSC's calibration is still refined; only the watchdog is off.
var TCGKernelArgs = []string{"norandmaps", "modprobe.blacklist=kvm_intel,kvm_amd", "tsc=nowatchdog"}

// directCmdline is a direct boot's command line: the boot entry's, then
// the VM's own arguments, then under TCG the harness's.
func directCmdline(entry string, extra []string, kvm bool) string {
	args := append([]string{entry}, extra...)
	if !kvm {
		args = append(args, TCGKernelArgs...)
	}
	return strings.Join(args, " ")
}

// isoEntry is what the ISO's own boot entry boots.
const (
	isoKernel  = "/kiln/vmlinuz"
	isoInitrd  = "/kiln/initrd.img"
	isoBootCfg = "/kiln/boot.cfg"
)

// ISOKernel is an ISO's boot entry as files on the host: its kernel and
// initramfs, copied out of the ISO, and its command line.
type ISOKernel struct {
	Kernel, Initrd, Cmdline string
}

// ReadISOKernel copies the kernel and initramfs of the ISO at iso's boot
// entry out of the ISO and reads the entry's kernel command line from
// its GRUB menu. The copies go beside the ISO, in .<name>.kernel/<key>,
// the key made of the ISO's size and modification time: a rebuilt ISO
// gets new copies and the old ones are removed.
func ReadISOKernel(iso string) (ISOKernel, error) {
	st, err := os.Stat(iso)
	if err != nil {
		return ISOKernel{}, err
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%d\x00%d", st.Size(), st.ModTime().UnixNano()))
	base := filepath.Join(filepath.Dir(iso), "."+filepath.Base(iso)+".kernel")
	dir := filepath.Join(base, hex.EncodeToString(sum[:8]))
	k, err := extractISOKernel(iso, base, dir)
	if err != nil {
		return ISOKernel{}, fmt.Errorf("the boot entry of %s: %w", iso, err)
	}
	return k, nil
}

// extractISOKernel reads the boot entry and, unless dir holds them
// already, copies the kernel and initramfs into dir (a temporary
// directory in base renamed into place) and removes base's other
// copies, those of earlier builds of the ISO.
func extractISOKernel(iso, base, dir string) (ISOKernel, error) {
	d, err := diskfs.Open(iso, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		return ISOKernel{}, err
	}
	defer d.Close()
	fs, err := d.GetFilesystem(0)
	if err != nil {
		return ISOKernel{}, fmt.Errorf("reading its ISO 9660 filesystem: %w", err)
	}
	cfg, err := readAll(fs, isoBootCfg)
	if err != nil {
		return ISOKernel{}, err
	}
	cmdline, err := grubLinuxArgs(string(cfg), isoKernel)
	if err != nil {
		return ISOKernel{}, fmt.Errorf("%s: %w", isoBootCfg, err)
	}
	k := ISOKernel{Kernel: filepath.Join(dir, "vmlinuz"), Initrd: filepath.Join(dir, "initrd.img"), Cmdline: cmdline}
	if _, err := os.Stat(k.Initrd); err == nil {
		return k, nil // copied by an earlier run
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return ISOKernel{}, err
	}
	tmp, err := os.MkdirTemp(base, "tmp-")
	if err != nil {
		return ISOKernel{}, err
	}
	defer os.RemoveAll(tmp)
	for _, f := range []struct{ from, to string }{{isoKernel, "vmlinuz"}, {isoInitrd, "initrd.img"}} {
		if err := copyOut(fs, f.from, filepath.Join(tmp, f.to)); err != nil {
			return ISOKernel{}, err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(k.Initrd); statErr != nil {
			return ISOKernel{}, err
		}
	}
	old, _ := os.ReadDir(base)
	for _, e := range old {
		if p := filepath.Join(base, e.Name()); p != dir && !strings.HasPrefix(e.Name(), "tmp-") {
			os.RemoveAll(p)
		}
	}
	return k, nil
}

// grubLinuxArgs is the command line of the linux line that loads kernel
// in a GRUB menu.
func grubLinuxArgs(cfg, kernel string) (string, error) {
	for _, line := range strings.Split(cfg, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "linux" && f[1] == kernel {
			return strings.Join(f[2:], " "), nil
		}
	}
	return "", fmt.Errorf("no \"linux %s\" line", kernel)
}

func readAll(fs filesystem.FileSystem, path string) ([]byte, error) {
	f, err := fs.OpenFile(path, os.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	defer f.Close()
	return io.ReadAll(f)
}

func copyOut(fs filesystem.FileSystem, from, to string) error {
	f, err := fs.OpenFile(from, os.O_RDONLY)
	if err != nil {
		return fmt.Errorf("opening %s: %w", from, err)
	}
	defer f.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, f); err != nil {
		out.Close()
		return fmt.Errorf("copying %s: %w", from, err)
	}
	return out.Close()
}
