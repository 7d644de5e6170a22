package builder

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// Host files for the ISO's BIOS boot (Debian's isolinux and syslinux-common).
const (
	isolinuxBin = "/usr/lib/ISOLINUX/isolinux.bin"
	isohdpfx    = "/usr/lib/ISOLINUX/isohdpfx.bin"
	ldlinux     = "/usr/lib/syslinux/modules/bios/ldlinux.c32"
)

// writeISO assembles a hybrid ISO: isolinux for BIOS (CD and, through the
// isohybrid MBR, USB), an El Torito EFI image holding GRUB for UEFI, and
// the squashfs where dracut's dmsquash-live looks for it. xorriso does the
// assembly: go-diskfs cannot write the isohybrid MBR/GPT a USB boot needs.
func (b *build) writeISO(ctx context.Context) error {
	tree := filepath.Join(b.work, "iso")
	efiImg := filepath.Join(tree, "boot", "efiboot.img")
	if err := os.MkdirAll(filepath.Dir(efiImg), 0o755); err != nil {
		return err
	}
	if err := b.makeEFIImage(ctx, efiImg); err != nil {
		return err
	}
	cmd := ISOCmdline(b.spec.Kernel.Cmdline)
	copies := []struct{ src, dst string }{
		{isolinuxBin, "isolinux/isolinux.bin"},
		{ldlinux, "isolinux/ldlinux.c32"},
		{filepath.Join(b.work, "boot", "vmlinuz"), "kiln/vmlinuz"},
		{filepath.Join(b.work, "boot", "initrd.img"), "kiln/initrd.img"},
	}
	for _, c := range copies {
		if err := copyFile(c.src, filepath.Join(tree, c.dst), 0o644); err != nil {
			return err
		}
	}
	texts := []file{{path: "/isolinux/isolinux.cfg", data: isolinuxCfg(cmd), mode: 0o644}, {path: bootConfig, data: grubBootCfg(cmd), mode: 0o644}}
	if err := writeFiles(tree, texts); err != nil {
		return err
	}
	squash := filepath.Join(tree, isoSquashPath)
	if err := os.MkdirAll(filepath.Dir(squash), 0o755); err != nil {
		return err
	}
	if err := os.Link(filepath.Join(b.work, "rootfs.squashfs"), squash); err != nil {
		return err
	}
	if err := clampTimes(tree, b); err != nil {
		return err
	}
	return b.run.Run(ctx, Cmd{Name: "xorriso", Env: []string{b.epochEnv}, Args: []string{
		"-as", "mkisofs", "-o", filepath.Join(b.stage, ISOName), "-V", ISOVolumeID,
		"-iso-level", "3", "-R", "-quiet",
		"-b", "isolinux/isolinux.bin", "-c", "isolinux/boot.cat",
		"-no-emul-boot", "-boot-load-size", "4", "-boot-info-table",
		"-isohybrid-mbr", isohdpfx,
		"-eltorito-alt-boot", "-e", "boot/efiboot.img", "-no-emul-boot", "-isohybrid-gpt-basdat",
		tree,
	}})
}

// makeEFIImage writes the FAT image the ISO's UEFI El Torito entry boots.
// It is FAT12, sized to the loader: a FAT32 volume cannot be smaller than
// 32 MiB, all of which the ISO would carry. mkfs.vfat --invariant and
// mtools under SOURCE_DATE_EPOCH (the loader's time set to it) give the
// same bytes on every build.
func (b *build) makeEFIImage(ctx context.Context, path string) error {
	loader := filepath.Join(b.work, "BOOTX64.EFI")
	st, err := os.Stat(loader)
	if err != nil {
		return fmt.Errorf("the EFI loader for the ISO: %w", err)
	}
	if err := os.Chtimes(loader, b.epoch(), b.epoch()); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	env := []string{b.epochEnv, "MTOOLS_SKIP_CHECK=1"}
	for _, c := range []Cmd{
		{Name: "mkfs.vfat", Args: []string{"--invariant", "-F", "12", "-i", efiVolumeID, "-n", "KILN-EFI", "-C", path, strconv.FormatInt(efiImageKiB(st.Size()), 10)}},
		{Name: "mmd", Args: []string{"-i", path, "::/EFI", "::/EFI/BOOT"}},
		{Name: "mcopy", Args: []string{"-m", "-i", path, loader, "::" + efiLoader}},
	} {
		c.Env = env
		if err := b.run.Run(ctx, c); err != nil {
			return fmt.Errorf("the ISO's EFI image: %w", err)
		}
	}
	return nil
}

// efiVolumeID is the EFI image's fixed FAT serial number ("KILN").
const efiVolumeID = "4b494c4e"

// efiImageKiB is the EFI image's size for a loader of n bytes: the loader
// with a quarter again of room (the FATs, directories, cluster slack),
// in whole MiB.
func efiImageKiB(n int64) int64 {
	return roundUp((n+n/4)/1024+64, mib/1024)
}

// clampTimes sets every file's timestamps in tree to the spec's epoch.
func clampTimes(tree string, b *build) error {
	return filepath.WalkDir(tree, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, b.epoch(), b.epoch())
	})
}
