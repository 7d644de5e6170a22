package builder

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"

	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
)

const (
	mib = int64(1) << 20
	// minFAT32 keeps a FAT32 volume above 65525 clusters of 512 bytes;
	// below that firmware reads it as FAT16 and cannot find the loader.
	minFAT32  = 40 * mib
	efiLoader = "/EFI/BOOT/BOOTX64.EFI"
)

// grubModules are linked into the EFI GRUB image; loadenv gives the raw
// disk's A/B script load_env and save_env (contract/bootslot).
var grubModules = []string{"part_gpt", "part_msdos", "fat", "iso9660", "search", "search_fs_file",
	"linux", "normal", "configfile", "loadenv", "serial", "terminal", "echo", "test", "all_video", "gzio", "zstd"}

// bootLoaders builds the EFI GRUB shared by the ISO and the raw disk; BIOS
// boots use isolinux from the host's syslinux packages. grub-mkimage with
// an embedded early config is used rather than grub-mkstandalone, whose
// memdisk tar carries the build time and so is never byte-reproducible.
func (b *build) bootLoaders(ctx context.Context) error {
	embedded := filepath.Join(b.work, "grub-embedded.cfg")
	if err := os.WriteFile(embedded, []byte(grubEmbedded), 0o644); err != nil {
		return err
	}
	args := []string{"-O", "x86_64-efi", "-o", filepath.Join(b.work, "BOOTX64.EFI"), "-c", embedded, "-p", "/EFI/BOOT"}
	return b.run.Run(ctx, Cmd{Name: "grub-mkimage", Args: append(args, grubModules...)})
}

// espFile is one file copied into a FAT filesystem.
type espFile struct{ src, dst string }

// fillFAT creates a FAT32 filesystem on partition part of d (0: the whole
// image) and copies files into it, with the timestamps fixed by
// SOURCE_DATE_EPOCH.
func fillFAT(d *disk.Disk, part int, label string, files []espFile) error {
	fs, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: part, FSType: filesystem.TypeFat32, VolumeLabel: label, Reproducible: true})
	if err != nil {
		return fmt.Errorf("creating FAT32 %s: %w", label, err)
	}
	for _, f := range files {
		if err := fs.Mkdir(path.Dir(f.dst)); err != nil {
			return fmt.Errorf("FAT32 %s: mkdir %s: %w", label, path.Dir(f.dst), err)
		}
		if err := copyInto(fs, f.src, f.dst); err != nil {
			return fmt.Errorf("FAT32 %s: %s: %w", label, f.dst, err)
		}
	}
	return nil
}

func copyInto(fs filesystem.FileSystem, src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := fs.OpenFile(dst, os.O_CREATE|os.O_RDWR)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		return err
	}
	return out.Close()
}

func fileSize(p string) (int64, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func roundUp(n, to int64) int64 { return (n + to - 1) / to * to }

// guid derives a stable GUID from the spec hash and a purpose, so the same
// spec always gives the same partition table.
func guid(specHash, purpose string) string {
	s := sha256.Sum256([]byte(specHash + "/" + purpose))
	s[6] = s[6]&0x0f | 0x40 // version 4 layout
	s[8] = s[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%X-%X-%X-%X-%X", s[0:4], s[4:6], s[6:8], s[8:10], s[10:16])
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}
