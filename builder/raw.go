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
	defer d.Close()
	if err := d.Partition(layout.table(b.spec.Hash)); err != nil {
		return fmt.Errorf("partitioning %s: %w", RawName, err)
	}
	if err := fillFAT(d, 1, ESPPartLabel, espFiles); err != nil {
		return err
	}
	f, err := os.Open(squash)
	if err != nil {
		return err
	}
	defer f.Close()
	// go-diskfs wants exactly the partition's size: pad with zeros.
	pad := int64(layout.rootEnd-layout.rootStart+1)*512 - rootSize
	if _, err := d.WritePartitionContents(2, io.MultiReader(f, io.LimitReader(zeros{}, pad))); err != nil {
		return fmt.Errorf("writing the root partition: %w", err)
	}
	return nil
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

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
