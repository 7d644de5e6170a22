package vm

import (
	"strings"
	"testing"
)

func TestArgsPerFirmwareAndBootDevice(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		want    []string // fragments that must appear, in order
		wantNot []string
	}{
		{"iso bios", Config{Dir: "/d", Firmware: BIOS, Boot: BootISO, ISO: "/o/node.iso", Ignition: []byte("{}")},
			[]string{"-machine pc", "-accel tcg", "-serial file:/d/console-1.log", "file=/o/node.iso,media=cdrom", "-boot d", "-fw_cfg name=opt/com.coreos/config,file=/d/config.ign"},
			[]string{"pflash"}},
		{"raw uefi with kvm", Config{Dir: "/d", Firmware: UEFI, Boot: BootDisk, KVM: true, Disks: []Disk{{"/d/node.raw", "raw"}}},
			[]string{"-machine q35", "-accel kvm", "readonly=on,file=" + OVMFCode, "file=/d/OVMF_VARS.fd", "file=/d/node.raw,format=raw,if=virtio", "-boot c"},
			[]string{"fw_cfg", "cdrom"}},
		{"direct kernel", Config{Dir: "/d", Firmware: BIOS, Boot: BootISO, ISO: "/o/node.iso", Kernel: "/k", Initrd: "/i", Append: "root=x a=b"},
			[]string{"-boot d", "-kernel /k -initrd /i -append root=x a=b"}, []string{"fw_cfg"}},
		{"pxe bios", Config{Dir: "/d", Firmware: BIOS, Boot: BootPXE, TFTPDir: "/t", BootFile: "kiln.ipxe"},
			[]string{"-nic user,model=virtio-net-pci,tftp=/t,bootfile=kiln.ipxe", "-boot n"},
			[]string{"fw_cfg"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			line := strings.Join(tc.cfg.Args(1), " ")
			pos := 0
			for _, w := range tc.want {
				i := strings.Index(line[pos:], w)
				if i < 0 {
					t.Fatalf("%q not found (in order) in:\n%s", w, line)
				}
				pos += i
			}
			for _, w := range tc.wantNot {
				if strings.Contains(line, w) {
					t.Errorf("%q should not be in:\n%s", w, line)
				}
			}
		})
	}
}

func TestCleanStripsTerminalEscapes(t *testing.T) {
	got := clean("\x1b[0;32m  OK  \x1b[0m] Reached target \x1b[1;39mMulti-User System\x1b[0m.\r")
	if got != "  OK  ] Reached target Multi-User System." {
		t.Fatalf("got %q", got)
	}
}
