package builder

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/contract/netboot"
)

// writeRaw writes a GPT disk image with go-diskfs: an ESP holding GRUB,
// slot a's kernel and initramfs (with room for slot b's), the A/B boot
// script and the boot-state record (contract/bootslot), then the two
// root slots, a holding the squashfs and b empty. The disk ends right after slot b; the agent
// creates the state partition in whatever space the real disk has beyond.
func (b *build) writeRaw(ctx context.Context) error {
	squash := filepath.Join(b.work, "rootfs.squashfs")
	record, err := initialRecord(b.opts.Version, squash)
	if err != nil {
		return err
	}
	cfg, env := filepath.Join(b.work, "raw-boot.cfg"), filepath.Join(b.work, "raw-grubenv")
	if err := os.WriteFile(cfg, []byte(rawBootCfg(b.spec.Kernel.Cmdline)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(env, record, 0o644); err != nil {
		return err
	}
	boot := filepath.Join(b.work, "boot")
	common := []espFile{{filepath.Join(b.work, "BOOTX64.EFI"), efiLoader}, {cfg, bootConfig}, {env, bootslot.EnvPath}}
	slotFiles := []espFile{{filepath.Join(boot, "vmlinuz"), bootslot.A.Kernel()}, {filepath.Join(boot, "initrd.img"), bootslot.A.Initrd()}}
	commonSize, err := filesSize(common)
	if err != nil {
		return err
	}
	slotBoot, err := filesSize(slotFiles)
	if err != nil {
		return err
	}
	rootSize, err := fileSize(squash)
	if err != nil {
		return err
	}
	espFiles := append(append([]espFile(nil), common...), slotFiles...)
	layout := rawLayout(commonSize, slotBoot, rootSize)
	path := filepath.Join(b.stage, RawName)
	// diskfs.Create truncates a new file to the disk's size: every byte
	// not written below (slot b, slot a past the squashfs) is a hole.
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
	// Slot a is the squashfs and zeros: a file-to-file copy at the
	// partition's offset is done by the kernel (copy_file_range), where
	// go-diskfs's own partition write takes 3 s for the same bytes.
	if err := copyAt(path, int64(layout.rootA.start)*512, squash); err != nil {
		return fmt.Errorf("writing root slot %s: %w", bootslot.A, err)
	}
	return nil
}

// initialRecord is the boot-state record a raw disk starts with: slot a
// active, holding this image (the kiln version and the squashfs's
// digest), slot b empty, nothing staged.
func initialRecord(version, squashfs string) ([]byte, error) {
	d, err := netboot.DigestFile(squashfs)
	if err != nil {
		return nil, err
	}
	return bootslot.Encode(bootslot.Record{
		Active: bootslot.A,
		SlotA:  bootslot.Image{Version: recordVersion(version), Digest: "sha256-" + d.SHA256},
	})
}

// recordVersion is a kiln version string as the boot-state record holds
// it: at most bootslot.MaxVersion of A-Z a-z 0-9 . _ + -. Any other
// character (the slash of a branch name in git describe, say) becomes
// '-', a longer version is cut, and no version is "dev", as for an
// unversioned kiln.
func recordVersion(v string) string {
	if v == "" {
		return "dev"
	}
	v = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._+-", r) {
			return r
		}
		return '-'
	}, v)
	if len(v) > bootslot.MaxVersion {
		v = v[:bootslot.MaxVersion]
	}
	return v
}

// filesSize is the sum of the sizes of files' sources.
func filesSize(files []espFile) (int64, error) {
	var total int64
	for _, f := range files {
		n, err := fileSize(f.src)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
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

// sectors is a partition's first and last 512-byte sector.
type sectors struct{ start, end uint64 }

// diskLayout is the raw image's geometry: the ESP and the two root slots.
type diskLayout struct {
	esp, rootA, rootB sectors
	total             int64
}

// slotSize is the size of each root slot for a squashfs of rootSize
// bytes: the squashfs and half as much again, at least 256 MiB more,
// rounded up to 64 MiB. An upgrade writes a later image into the slot
// the node is not running from, and that image must fit the slot it is
// staged into; the slots cannot grow once the state partition follows
// them on the disk.
func slotSize(rootSize int64) int64 {
	return roundUp(rootSize+max(rootSize/2, 256*mib), 64*mib)
}

// espSize is the size of the ESP for GRUB, boot.cfg and the record
// (common bytes) and a slot's kernel and initrd (slotBoot bytes): room
// for three sets of a slot's boot files, each half as large again, plus
// 8 MiB, rounded up to 1 MiB and above the FAT32 minimum. A stage
// installs the other slot's kernel and initrd beside the running slot's,
// each through a temporary file renamed over the old one, so the old
// and the new set of the staged slot are there at once; a later image's
// may be larger.
func espSize(common, slotBoot int64) int64 {
	return max(roundUp(common+3*(slotBoot+slotBoot/2)+8*mib, mib), minFAT32+8*mib)
}

// rawLayout sizes the ESP by espSize and both root slots by slotSize,
// each partition 1 MiB-aligned, plus 1 MiB at each end for the GPT
// headers.
func rawLayout(espCommon, slotBoot, rootSize int64) diskLayout {
	esp := espSize(espCommon, slotBoot)
	slot := slotSize(rootSize)
	const sector = 512
	next := uint64(mib / sector)
	part := func(size int64) sectors {
		s := sectors{start: next, end: next + uint64(size/sector) - 1}
		next = s.end + 1
		return s
	}
	l := diskLayout{esp: part(esp), rootA: part(slot), rootB: part(slot)}
	l.total = mib + esp + 2*slot + mib
	return l
}

func (l diskLayout) table(specHash string) *gpt.Table {
	return &gpt.Table{
		LogicalSectorSize: 512, PhysicalSectorSize: 512, ProtectiveMBR: true,
		GUID: guid(specHash, "disk"),
		Partitions: []*gpt.Partition{
			{Index: 1, Start: l.esp.start, End: l.esp.end, Type: gpt.EFISystemPartition, Name: ESPPartLabel, GUID: guid(specHash, "esp")},
			{Index: 2, Start: l.rootA.start, End: l.rootA.end, Type: gpt.LinuxFilesystem, Name: bootslot.A.PartLabel(), GUID: guid(specHash, "root-a")},
			{Index: 3, Start: l.rootB.start, End: l.rootB.end, Type: gpt.LinuxFilesystem, Name: bootslot.B.PartLabel(), GUID: guid(specHash, "root-b")},
		},
	}
}
