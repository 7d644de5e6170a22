package builder

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/partition/gpt"

	"github.com/kiln-project/kiln/contract/bootslot"
)

func TestRecordVersion(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"v1.2.3", "v1.2.3"},
		{"13696e6-dirty", "13696e6-dirty"},
		{"v0.9.1-3-gabc+build_7", "v0.9.1-3-gabc+build_7"},
		{"feature/ab raw", "feature-ab-raw"},
		{"v1~rc1:été", "v1-rc1--t-"},
		{"", "dev"},
		{strings.Repeat("x", 70), strings.Repeat("x", bootslot.MaxVersion)},
		{strings.Repeat("é", 70), strings.Repeat("-", bootslot.MaxVersion)},
	} {
		got := recordVersion(tc.in)
		if got != tc.want {
			t.Errorf("recordVersion(%q) = %q, want %q", tc.in, got, tc.want)
		}
		r := bootslot.Record{Active: bootslot.A, SlotA: bootslot.Image{Version: got, Digest: "sha256-" + strings.Repeat("0", 64)}}
		if err := r.Validate(); err != nil {
			t.Errorf("recordVersion(%q) = %q, which the record refuses: %v", tc.in, got, err)
		}
	}
}

// writeRaw, on small stand-ins for GRUB, the kernel, the initramfs and
// the squashfs: the disk has the ESP and both root slots, slot a holds
// the squashfs and slot b is a hole; the ESP holds slot a's boot files,
// the A/B script and a record that boots slot a, naming the squashfs's
// digest.
func TestRawDiskHasTheSlotsAndTheRecord(t *testing.T) {
	work := t.TempDir()
	b := testBuild(work)
	b.stage = t.TempDir()
	b.spec.Hash = strings.Repeat("5", 64)
	b.spec.Kernel.Cmdline = []string{"quiet"}
	b.opts.Version = "v1.2.3-4-gabc/dirty"
	squash := bytes.Repeat([]byte("squashfs"), 3<<17) // 3 MiB
	files := map[string][]byte{
		"BOOTX64.EFI":     []byte("an EFI GRUB"),
		"boot/vmlinuz":    []byte("a kernel"),
		"boot/initrd.img": []byte("an initramfs"),
		"rootfs.squashfs": squash,
	}
	for name, data := range files {
		writeFile(t, filepath.Join(work, name), string(data))
	}
	if err := b.writeRaw(context.Background()); err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(b.stage, RawName)
	d, err := diskfs.Open(path, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pt, err := d.GetPartitionTable()
	if err != nil {
		t.Fatal(err)
	}
	table, ok := pt.(*gpt.Table)
	if !ok {
		t.Fatalf("partition table %T, want GPT", pt)
	}
	want := []struct {
		name, guid string
		typ        gpt.Type
	}{
		{ESPPartLabel, guid(b.spec.Hash, "esp"), gpt.EFISystemPartition},
		{"KILN-ROOT-A", guid(b.spec.Hash, "root-a"), gpt.LinuxFilesystem},
		{"KILN-ROOT-B", guid(b.spec.Hash, "root-b"), gpt.LinuxFilesystem},
	}
	if len(table.Partitions) != len(want) {
		t.Fatalf("%d partitions, want %d", len(table.Partitions), len(want))
	}
	for i, w := range want {
		p := table.Partitions[i]
		if p.Name != w.name || p.Type != w.typ || !strings.EqualFold(p.GUID, w.guid) {
			t.Errorf("partition %d: %s %s %s, want %s %s %s", i+1, p.Name, p.Type, p.GUID, w.name, w.typ, w.guid)
		}
	}
	if bootslot.A.PartLabel() != want[1].name || bootslot.B.PartLabel() != want[2].name {
		t.Errorf("bootslot's labels are %s and %s", bootslot.A.PartLabel(), bootslot.B.PartLabel())
	}
	slotA, slotB := table.Partitions[1], table.Partitions[2]
	slot := slotSize(int64(len(squash)))
	if int64(slotA.Size) != slot || int64(slotB.Size) != slot {
		t.Errorf("slots of %d and %d bytes, want %d each", slotA.Size, slotB.Size, slot)
	}
	if end := int64(slotB.End+1)*512 + mib; end != fileSizeOf(t, path) {
		t.Errorf("the disk is %d bytes, want slot b's end and 1 MiB for the backup GPT: %d", fileSizeOf(t, path), end)
	}

	// slot a is the squashfs, then zeros; slot b is zeros and not
	// written at all: the file holds no blocks for it.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a := raw[slotA.Start*512 : (slotA.End+1)*512]
	if !bytes.Equal(a[:len(squash)], squash) || bytes.ContainsFunc(a[len(squash):], nonZero) {
		t.Error("slot a is not the squashfs followed by zeros")
	}
	if bytes.ContainsFunc(raw[slotB.Start*512:(slotB.End+1)*512], nonZero) {
		t.Error("slot b is not zeros")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if allocated := st.Blocks * 512; allocated > int64(len(raw))-slot {
		t.Errorf("%d bytes allocated of %d: slot b's %d zeros were written", allocated, len(raw), slot)
	}

	fs, err := d.GetFilesystem(1)
	if err != nil {
		t.Fatal(err)
	}
	for dst, src := range map[string]string{
		efiLoader: "BOOTX64.EFI", bootslot.A.Kernel(): "boot/vmlinuz", bootslot.A.Initrd(): "boot/initrd.img",
	} {
		if got := readFATFile(t, fs, dst); !bytes.Equal(got, files[src]) {
			t.Errorf("ESP %s = %q, want %s's %q", dst, got, src, files[src])
		}
	}
	cfg := string(readFATFile(t, fs, bootConfig))
	if cfg != rawBootCfg(b.spec.Kernel.Cmdline) || !strings.Contains(cfg, bootslot.Script(b.spec.Kernel.Cmdline)) {
		t.Errorf("ESP %s does not hold the A/B script with the spec's arguments:\n%s", bootConfig, cfg)
	}
	env := readFATFile(t, fs, bootslot.EnvPath)
	if len(env) != bootslot.BlockSize {
		t.Errorf("ESP %s is %d bytes, want %d", bootslot.EnvPath, len(env), bootslot.BlockSize)
	}
	r, err := bootslot.Decode(env)
	if err != nil {
		t.Fatalf("ESP %s: %v", bootslot.EnvPath, err)
	}
	sum := sha256.Sum256(squash)
	wantRecord := bootslot.Record{Active: bootslot.A,
		SlotA: bootslot.Image{Version: "v1.2.3-4-gabc-dirty", Digest: "sha256-" + hex.EncodeToString(sum[:])}}
	if r != wantRecord {
		t.Errorf("the record is %+v (%s), want %+v", r, r.State(), wantRecord)
	}
	if slot, _ := bootslot.Choose(r); slot != bootslot.A {
		t.Errorf("GRUB would boot slot %s from the record, want a", slot)
	}
}

func nonZero(r rune) bool { return r != 0 }

func fileSizeOf(t *testing.T, p string) int64 {
	t.Helper()
	n, err := fileSize(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func readFATFile(t *testing.T, fs filesystem.FileSystem, p string) []byte {
	t.Helper()
	f, err := fs.OpenFile(p, os.O_RDONLY)
	if err != nil {
		t.Fatalf("ESP %s: %v", p, err)
	}
	// One read of a buffer larger than the file: go-diskfs's FAT reader
	// ignores the file's size in a read that starts inside a cluster,
	// which io.ReadAll's growing reads do.
	buf := make([]byte, 1<<20)
	var data []byte
	for {
		n, err := f.Read(buf)
		data = append(data, buf[:n]...)
		if err == io.EOF {
			return data
		}
		if err != nil {
			t.Fatalf("ESP %s: %v", p, err)
		}
	}
}
