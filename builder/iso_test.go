package builder

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/images"
)

func TestEFIImageKiB(t *testing.T) {
	for _, tc := range []struct {
		loader int64
		want   int64
	}{
		{0, 1024},
		{700 << 10, 1024},
		{1500000, 2048},
		{3 << 20, 4096},
	} {
		if got := efiImageKiB(tc.loader); got != tc.want {
			t.Errorf("efiImageKiB(%d) = %d, want %d", tc.loader, got, tc.want)
		}
	}
}

// TestEFIImageIsSmallReproducibleFAT builds the ISO's EFI image with the
// host's dosfstools and mtools (installed by make deps), twice and a
// second apart: the same bytes, a clean fsck, the loader inside.
func TestEFIImageIsSmallReproducibleFAT(t *testing.T) {
	for _, tool := range []string{"mkfs.vfat", "mmd", "mcopy", "mdir", "fsck.vfat"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (make deps installs dosfstools and mtools)", tool)
		}
	}
	loader := bytes.Repeat([]byte("kiln EFI loader "), 100000) // 1.6 MB
	var built [2][]byte
	for i := range built {
		work := t.TempDir()
		if err := os.WriteFile(filepath.Join(work, "BOOTX64.EFI"), loader, 0o644); err != nil {
			t.Fatal(err)
		}
		b := testBuild(work)
		out := filepath.Join(work, "efiboot.img")
		if err := b.makeEFIImage(context.Background(), out); err != nil {
			t.Fatalf("makeEFIImage: %v", err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		built[i] = data
		if len(data) > 4<<20 {
			t.Errorf("EFI image is %d bytes for a %d-byte loader", len(data), len(loader))
		}
		if out, err := exec.Command("fsck.vfat", "-n", filepath.Join(work, "efiboot.img")).CombinedOutput(); err != nil {
			t.Errorf("fsck.vfat: %v\n%s", err, out)
		}
		listing, err := exec.Command("mdir", "-i", filepath.Join(work, "efiboot.img"), "::/EFI/BOOT").CombinedOutput()
		if err != nil || !strings.Contains(string(listing), "BOOTX64  EFI") || !strings.Contains(string(listing), strconv.Itoa(len(loader))) {
			t.Errorf("mdir ::/EFI/BOOT: %v\n%s", err, listing)
		}
		if i == 0 {
			time.Sleep(1100 * time.Millisecond)
		}
	}
	if !bytes.Equal(built[0], built[1]) {
		t.Error("two builds of the EFI image differ")
	}
}

func testBuild(work string) *build {
	spec := &images.Spec{SourceDateEpoch: 1735689600}
	return &build{spec: spec, work: work, run: ExecRunner{Env: os.Environ()},
		epochEnv: sourceDateEpochEnv(spec.SourceDateEpoch)}
}
