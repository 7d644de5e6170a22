package qemutests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

// The A/B boot-state record's GRUB script (contract/bootslot) under real
// firmware: OVMF boots an EFI GRUB from a FAT ESP holding the script and
// a record with slot b staged for one try. GRUB picks b and saves the
// tries it has left on the ESP (save_env); the next boot, with no verdict
// written, comes back on slot a, and the agent's Conclude reads each
// record as GRUB left it: a trying boot of b, then a rollback to a. The
// script's logic is proved state by state in grub-emu (make unit); this
// proves the firmware, the FAT write and the loadenv module the builder
// must link.
func TestBootSlotScriptUnderOVMF(t *testing.T) {
	outDir(t)
	parallelBoot(t)
	dir := t.TempDir()
	disk := slotESPDisk(t, dir)
	v, err := vm.Start(vm.Config{Name: "bootslot", Dir: dir, Firmware: vm.UEFI, Boot: vm.BootDisk,
		Disks: []vm.Disk{{Path: disk, Format: "raw"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.PowerCut)
	for _, want := range []struct {
		slot    bootslot.Slot
		outcome bootslot.Outcome
		args    string // the extra arguments GRUB passes the slot's kernel
	}{
		{bootslot.B, bootslot.Trying, strings.Join(slotBArgs, " ")},
		{bootslot.A, bootslot.RolledBack, ""},
	} {
		line := waitLine(t, v, `kiln-slot-test: chose [ab]`)
		if !strings.HasSuffix(strings.TrimSpace(line), "chose "+string(want.slot)) {
			t.Fatalf("boot %d: %q, want slot %s", v.Boot(), line, want.slot)
		}
		// GRUB writes each echo to the serial port twice (its serial and
		// its EFI console): the first copy is whole.
		args := regexp.MustCompile(`kiln-slot-test: args=\[([^]]*)\]`).FindStringSubmatch(waitLine(t, v, `kiln-slot-test: args=\[[^]]*\]`))
		if args[1] != want.args {
			t.Errorf("boot %d: GRUB passed the extra arguments %q, want %q", v.Boot(), args[1], want.args)
		}
		// GRUB saved the record before it said its choice, then waits:
		// the power is cut while nothing writes.
		v.PowerCut()
		r, err := bootslot.Decode(readESPFile(t, disk, bootslot.EnvPath))
		if err != nil {
			t.Fatalf("boot %d: the record GRUB left: %v", v.Boot(), err)
		}
		boot, _, err := bootslot.Conclude(r, want.slot)
		if err != nil || boot.Outcome != want.outcome {
			t.Fatalf("boot %d on slot %s: record %s concludes %q (%v), want %q", v.Boot(), want.slot, r.State(), boot.Outcome, err, want.outcome)
		}
		t.Logf("boot %d: GRUB chose slot %s and left %s: %s", v.Boot(), want.slot, r.State(), boot.Outcome)
		if v.Boot() == 1 {
			if err := v.Restart(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// slotBArgs are slot b's own kernel arguments, in its arguments file.
var slotBArgs = []string{"kiln.test=own", "console=ttyS9"}

// slotESPDisk is a GPT disk whose ESP holds an EFI GRUB with the script's
// modules, the script in /kiln/boot.cfg (linux and initrd print instead
// of loading a kernel, then GRUB waits), the record "active a, staged b
// (tries 1)" and slot b's arguments file.
func slotESPDisk(t *testing.T, dir string) string {
	t.Helper()
	const embedded = `serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
search --no-floppy --set=root --file /kiln/boot.cfg
configfile ($root)/kiln/boot.cfg
`
	cfg := "set timeout=0\n" + strings.NewReplacer("  linux ", "  echo kiln-slot-test: linux ", "  initrd ", "  echo kiln-slot-test: initrd ").
		Replace(bootslot.Script(nil)) + "echo \"kiln-slot-test: args=[${kiln_args}]\"\necho \"kiln-slot-test: chose ${kiln_slot}\"\nsleep 600\n"
	digest := "sha256-" + strings.Repeat("ab", 32)
	r := bootslot.Record{Active: bootslot.A, SlotA: bootslot.Image{Version: "v1", Digest: digest}}
	r, err := bootslot.Stage(r, bootslot.B, bootslot.Image{Version: "v2", Digest: digest})
	if err == nil {
		r, err = bootslot.StageWritten(r, bootslot.B, digest)
	}
	if err != nil {
		t.Fatal(err)
	}
	record, err := bootslot.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	args, err := bootslot.EncodeArgs(slotBArgs)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"embedded.cfg": embedded, "boot.cfg": cfg, "grubenv": string(record), "args.cfg": string(args)}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	disk, esp := filepath.Join(dir, "disk.raw"), filepath.Join(dir, "esp.img")
	runTool(t, dir, "grub-mkimage", "-O", "x86_64-efi", "-o", "BOOTX64.EFI", "-c", "embedded.cfg", "-p", "/EFI/BOOT",
		"part_gpt", "fat", "search", "search_fs_file", "normal", "configfile", "serial", "terminal", "echo", "test", "loadenv", "sleep")
	runTool(t, dir, "truncate", "-s", "64M", disk)
	runTool(t, dir, "sgdisk", "-o", "-n", "1:2048:0", "-t", "1:ef00", "-c", "1:KILN-ESP", disk)
	runTool(t, dir, "mkfs.fat", "-F", "32", "-C", esp, fmt.Sprint(60*1024))
	runTool(t, dir, "mmd", "-i", esp, "::/EFI", "::/EFI/BOOT", "::/kiln", "::/kiln/b")
	runTool(t, dir, "mcopy", "-i", esp, "BOOTX64.EFI", "::/EFI/BOOT/BOOTX64.EFI")
	runTool(t, dir, "mcopy", "-i", esp, "boot.cfg", "::/kiln/boot.cfg")
	runTool(t, dir, "mcopy", "-i", esp, "grubenv", "::"+bootslot.EnvPath)
	runTool(t, dir, "mcopy", "-i", esp, "args.cfg", "::"+bootslot.B.Args())
	runTool(t, dir, "dd", "if="+esp, "of="+disk, "bs=1M", "seek=1", "conv=notrunc", "status=none")
	return disk
}

// readESPFile reads path from the FAT ESP at 1 MiB into disk.
func readESPFile(t *testing.T, disk, path string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(path))
	runTool(t, filepath.Dir(disk), "mcopy", "-o", "-i", disk+"@@1M", "::"+path, out)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// writeESPFile copies src over path on the FAT ESP at 1 MiB into disk.
func writeESPFile(t *testing.T, disk, path, src string) {
	t.Helper()
	dir := filepath.Dir(path)
	if dir != "/" {
		cmd := exec.Command("mmd", "-i", disk+"@@1M", "::"+dir)
		cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
		_ = cmd.Run() // exists already, or the copy says what is wrong
	}
	runTool(t, filepath.Dir(disk), "mcopy", "-o", "-i", disk+"@@1M", src, "::"+path)
}

func runTool(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
