package builder

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"
)

// writeRaw writes a GPT disk image with go-diskfs: an ESP holding GRUB,
// the kernel and the initramfs, then the squashfs as the root partition.
// The disk ends right after it; the agent creates the state partition in
// whatever space the real disk has beyond.
func (b *build) writeRaw(ctx context.Context) error {
	boot := filepath.Join(b.work, "boot")
	espFiles := []espFile{
		{filepath.Join(b.work, "BOOTX64.EFI"), efiLoader},
		{filepath.Join(boot, "vmlinuz"), bootKernel},
		{filepath.Join(boot, "initrd.img"), bootInitrd},
	}
	cfg := filepath.Join(b.work, "raw-boot.cfg")
	if err := os.WriteFile(cfg, []byte(grubBootCfg(RawCmdline(b.spec.Kernel.Cmdline))), 0o644); err != nil {
		return err
	}
	espFiles = append(espFiles, espFile{cfg, bootConfig})
	var content int64
	for _, f := range espFiles {
		n, err := fileSize(f.src)
		if err != nil {
			return err
		}
		content += n
	}
	squash := filepath.Join(b.work, "rootfs.squashfs")
	rootSize, err := fileSize(squash)
	if err != nil {
		return err
	}
	layout := rawLayout(content, rootSize)
	path := filepath.Join(b.stage, RawName)
	d, err := diskfs.Create(path, layout.total, diskfs.SectorSizeDefault)
	if err != nil {
		return fmt.Errorf("creating %s: %w", RawName, err)
	}
	err = d.Partition(layout.table(b.spec.Hash))
	if err != nil {
		err = fmt.Errorf("partitioning %s: %w", RawName, err)
	} else {
		err = fillFAT(d, 1, ESPPartLabel, espFiles)
	}
	if cerr := d.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", RawName, err)
	}
	// The root partition is the squashfs and zeros: go-diskfs created
	// the file at its full size (zeros), and a file-to-file copy at the
	// partition's offset is done by the kernel (copy_file_range), where
	// go-diskfs's own partition write takes 3 s for the same bytes.
	if err := copyAt(path, int64(layout.rootStart)*512, squash); err != nil {
		return fmt.Errorf("writing the root partition: %w", err)
	}
	return nil
}

// copyAt writes the file src into dst at offset.
func copyAt(dst string, offset int64, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := out.Seek(offset, io.SeekStart); err != nil {
		out.Close()
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// diskLayout is the raw image's geometry in 512-byte sectors.
type diskLayout struct {
	espStart, espEnd, rootStart, rootEnd uint64
	total                                int64
}

// rawLayout sizes the ESP for its content with room to spare (and above
// the FAT32 minimum) and the root partition for the squashfs, each
// 1 MiB-aligned, plus 1 MiB at each end for the GPT headers.
func rawLayout(espContent, rootSize int64) diskLayout {
	esp := max(roundUp(espContent+espContent/4+8*mib, mib), minFAT32+8*mib)
	root := roundUp(rootSize, mib)
	const sector = 512
	l := diskLayout{espStart: uint64(mib / sector)}
	l.espEnd = l.espStart + uint64(esp/sector) - 1
	l.rootStart = l.espEnd + 1
	l.rootEnd = l.rootStart + uint64(root/sector) - 1
	l.total = mib + esp + root + mib
	return l
}

func (l diskLayout) table(specHash string) *gpt.Table {
	return &gpt.Table{
		LogicalSectorSize: 512, PhysicalSectorSize: 512, ProtectiveMBR: true,
		GUID: guid(specHash, "disk"),
		Partitions: []*gpt.Partition{
			{Index: 1, Start: l.espStart, End: l.espEnd, Type: gpt.EFISystemPartition, Name: ESPPartLabel, GUID: guid(specHash, "esp")},
			{Index: 2, Start: l.rootStart, End: l.rootEnd, Type: gpt.LinuxFilesystem, Name: RootPartLabel, GUID: guid(specHash, "root")},
		},
	}
}
