package state

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreos/ignition/v2/config/v3_5/types"
)

type execRunner struct{}

func (execRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %v: %w: %s", name, args, err, out)
	}
	return out, nil
}

// loopDisk attaches a sparse file as a block device: the real sgdisk,
// partx, blkid and mkfs.ext4 run against it.
func loopDisk(t *testing.T, mib int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for loop devices")
	}
	for _, tool := range []string{"losetup", "sgdisk", "mkfs.ext4", "blkid", "partx"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/host-deps.sh installs it)", tool)
		}
	}
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.Truncate(img, 0); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	f, _ := os.Create(img)
	f.Truncate(int64(mib) << 20)
	f.Close()
	out, err := exec.Command("losetup", "-f", "-P", "--show", img).Output()
	if err != nil {
		t.Skipf("no loop device available: %v", err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	return dev
}

func TestCreateMakesALabelledExt4PartitionOnABlankDisk(t *testing.T) {
	disk := loopDisk(t, 64)
	m := &Manager{Root: "/", Sys: execRunner{}}
	dev, err := m.Create(context.Background(), Target{Disk: disk})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(dev, disk) {
		t.Errorf("partition %s is not on %s", dev, disk)
	}
	out, err := exec.Command("blkid", "-p", "-o", "export", dev).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"TYPE=ext4", "LABEL=" + Label, "PART_ENTRY_NAME=" + Label} {
		if !strings.Contains(string(out), want+"\n") {
			t.Errorf("blkid of %s lacks %s:\n%s", dev, want, out)
		}
	}
}

func TestCreateRefusesADiskThatHoldsAFilesystem(t *testing.T) {
	disk := loopDisk(t, 32)
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-L", "precious", disk).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	m := &Manager{Root: "/", Sys: execRunner{}}
	_, err := m.Create(context.Background(), Target{Disk: disk})
	if err == nil || !strings.Contains(err.Error(), "refusing to partition") {
		t.Fatalf("err = %v, want a refusal", err)
	}
	out, _ := exec.Command("blkid", "-p", "-o", "value", "-s", "LABEL", disk).Output()
	if strings.TrimSpace(string(out)) != "precious" {
		t.Fatalf("the existing filesystem was touched: label now %q", out)
	}
}

func TestTargetForPrefersTheDiskTheConfigLabels(t *testing.T) {
	label, size := Label, 512
	cfg := types.Config{Storage: types.Storage{Disks: []types.Disk{
		{Device: "/dev/vdb", Partitions: []types.Partition{{Label: &label, Number: 3, SizeMiB: &size}}},
	}}}
	m := &Manager{Root: t.TempDir(), Sys: execRunner{}}
	got, ok, err := m.TargetFor(context.Background(), cfg)
	if err != nil || !ok || got != (Target{Disk: "/dev/vdb", Number: 3, SizeMiB: 512}) {
		t.Fatalf("TargetFor = %+v %v %v", got, ok, err)
	}
	// No disk named and no KILN-ROOT partition (CD or PXE boot): RAM.
	if _, ok, err := m.TargetFor(context.Background(), types.Config{}); ok || err != nil {
		t.Fatalf("diskless TargetFor ok=%v err=%v, want no target", ok, err)
	}
}
