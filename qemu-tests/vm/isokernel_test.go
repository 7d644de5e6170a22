package vm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
)

// writeISO makes an ISO 9660 image holding files (path to contents).
func writeISO(t *testing.T, path string, files map[string]string) {
	t.Helper()
	d, err := diskfs.Create(path, 4<<20, diskfs.SectorSize(2048))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeISO9660, VolumeLabel: "KILN"})
	if err != nil {
		t.Fatal(err)
	}
	for p, data := range files {
		if err := fs.Mkdir(filepath.Dir(p)); err != nil {
			t.Fatal(err)
		}
		f, err := fs.OpenFile(p, os.O_CREATE|os.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.(*iso9660.FileSystem).Finalize(iso9660.FinalizeOptions{RockRidge: true}); err != nil {
		t.Fatal(err)
	}
}

func TestReadISOKernelTakesTheBootEntryFromTheISO(t *testing.T) {
	iso := filepath.Join(t.TempDir(), "node.iso")
	writeISO(t, iso, map[string]string{
		isoKernel:  "kernel bytes",
		isoInitrd:  "initrd bytes",
		isoBootCfg: "set timeout=0\nmenuentry \"kiln\" {\n\tlinux /kiln/vmlinuz root=live:CDLABEL=KILN console=ttyS0,115200 a=b\n\tinitrd /kiln/initrd.img\n}\n",
	})
	k, err := ReadISOKernel(iso)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(filepath.Dir(k.Kernel)) != filepath.Join(filepath.Dir(iso), ".node.iso.kernel") {
		t.Errorf("kernel copied to %s, want it beside the ISO", k.Kernel)
	}
	if want := "root=live:CDLABEL=KILN console=ttyS0,115200 a=b"; k.Cmdline != want {
		t.Errorf("command line %q, want %q", k.Cmdline, want)
	}
	for path, want := range map[string]string{k.Kernel: "kernel bytes", k.Initrd: "initrd bytes"} {
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("%s: %q (%v), want %q", path, got, err, want)
		}
	}
}

func TestReadISOKernelNamesWhatIsMissing(t *testing.T) {
	iso := filepath.Join(t.TempDir(), "node.iso")
	writeISO(t, iso, map[string]string{isoKernel: "k", isoInitrd: "i", isoBootCfg: "menuentry \"other\" {\n\tlinux /boot/other root=x\n}\n"})
	_, err := ReadISOKernel(iso)
	if err == nil || !strings.Contains(err.Error(), `no "linux /kiln/vmlinuz" line`) || !strings.Contains(err.Error(), iso) {
		t.Fatalf("error %v, want one naming the ISO and the missing boot entry", err)
	}
}

func TestDirectCmdline(t *testing.T) {
	tests := []struct {
		name  string
		extra []string
		kvm   bool
		want  string
	}{
		{"tcg", nil, false, "root=x norandmaps modprobe.blacklist=kvm_intel,kvm_amd tsc=nowatchdog"},
		{"tcg with the VM's arguments first", []string{"systemd.mask=a.service"}, false, "root=x systemd.mask=a.service norandmaps modprobe.blacklist=kvm_intel,kvm_amd tsc=nowatchdog"},
		{"kvm keeps randomisation", []string{"b=c"}, true, "root=x b=c"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := directCmdline("root=x", tc.extra, tc.kvm); got != tc.want {
				t.Errorf("%q, want %q", got, tc.want)
			}
		})
	}
}

func TestCheckRejectsADirectBootWithoutAnISO(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"iso", Config{Direct: true, Boot: BootISO, ISO: "/o/node.iso"}, true},
		{"disk", Config{Direct: true, Boot: BootDisk, ISO: "/o/node.iso"}, false},
		{"no iso", Config{Direct: true, Boot: BootISO}, false},
		{"own kernel", Config{Direct: true, Boot: BootISO, ISO: "/o/node.iso", Kernel: "/k"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Check(); (err == nil) != tc.ok {
				t.Errorf("Check() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestReadISOKernelReplacesTheCopiesOfAnEarlierBuild(t *testing.T) {
	iso := filepath.Join(t.TempDir(), "node.iso")
	files := map[string]string{isoKernel: "k1", isoInitrd: "i1", isoBootCfg: "\tlinux /kiln/vmlinuz root=x\n"}
	writeISO(t, iso, files)
	first, err := ReadISOKernel(iso)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(iso)
	files[isoKernel] = "k2"
	writeISO(t, iso, files)
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(iso, later, later); err != nil {
		t.Fatal(err)
	}
	second, err := ReadISOKernel(iso)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(second.Kernel); string(got) != "k2" {
		t.Errorf("kernel after the rebuild: %q, want k2", got)
	}
	if _, err := os.Stat(filepath.Dir(first.Kernel)); !os.IsNotExist(err) {
		t.Errorf("the earlier build's copies are still there (%v)", err)
	}
}
