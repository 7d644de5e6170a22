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
			[]string{"pflash", "-cpu"}},
		{"raw uefi with kvm", Config{Dir: "/d", Firmware: UEFI, Boot: BootDisk, KVM: true, Disks: []Disk{{"/d/node.raw", "raw"}}},
			[]string{"-machine q35", "-accel kvm", "-cpu host", "readonly=on,file=" + OVMFCode, "file=/d/OVMF_VARS.fd", "file=/d/node.raw,format=raw,if=virtio", "-boot c"},
			[]string{"fw_cfg", "cdrom"}},
		{"direct kernel", Config{Dir: "/d", Firmware: BIOS, Boot: BootISO, ISO: "/o/node.iso", Kernel: "/k", Initrd: "/i", Append: "root=x a=b"},
			[]string{"-boot d", "-kernel /k -initrd /i -append root=x a=b"}, []string{"fw_cfg"}},
		{"pxe bios", Config{Dir: "/d", Firmware: BIOS, Boot: BootPXE, TFTPDir: "/t", BootFile: "kiln.ipxe"},
			[]string{"-nic user,model=virtio-net-pci,tftp=/t,bootfile=kiln.ipxe", "-boot n", "-fw_cfg name=etc/sercon-port,file=/d/sercon-port"},
			[]string{"opt/com.coreos"}},
		{"pxe on a tap", Config{Dir: "/d", Firmware: BIOS, Boot: BootPXE, Tap: "kt-w1", MAC: "52:54:00:77:00:21"},
			[]string{"-netdev tap,id=net0,ifname=kt-w1", "-boot n", "etc/sercon-port"},
			[]string{"-nic", "tftp="}},
		{"user net with mac and hostfwd", Config{Dir: "/d", Boot: BootISO, ISO: "/o/node.iso", MAC: "52:54:00:00:00:01", HostFwd: []string{"tcp:127.0.0.1:1-10.0.2.50:6443"}},
			[]string{"-nic user,model=virtio-net-pci,mac=52:54:00:00:00:01,hostfwd=tcp:127.0.0.1:1-10.0.2.50:6443"},
			[]string{"-netdev", "tap"}},
		{"tap", Config{Dir: "/d", Boot: BootISO, ISO: "/o/node.iso", Tap: "kt-m1", MAC: "52:54:00:77:00:11"},
			[]string{"-netdev tap,id=net0,ifname=kt-m1,script=no,downscript=no -device virtio-net-pci,netdev=net0,mac=52:54:00:77:00:11", "-boot d"},
			[]string{"-nic", "user", "hostfwd"}},
		{"tap without mac", Config{Dir: "/d", Boot: BootISO, ISO: "/o/node.iso", Tap: "kt-m1"},
			[]string{"-netdev tap,id=net0,ifname=kt-m1,script=no,downscript=no -device virtio-net-pci,netdev=net0"},
			[]string{"mac=", "-nic"}},
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

func TestCommandRunsQEMUInTheNamespace(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		wantProg string
		wantHead []string
	}{
		{"host", Config{Dir: "/d", ISO: "/o/node.iso"}, "qemu-system-x86_64", []string{"-machine"}},
		{"netns", Config{Dir: "/d", ISO: "/o/node.iso", Netns: "kiln-t-c1", Tap: "kt-m1"}, "ip", []string{"netns", "exec", "kiln-t-c1", "qemu-system-x86_64", "-machine"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prog, args := tc.cfg.Command(1)
			if prog != tc.wantProg || len(args) < len(tc.wantHead) || strings.Join(args[:len(tc.wantHead)], " ") != strings.Join(tc.wantHead, " ") {
				t.Fatalf("got %s %v, want %s %v ...", prog, args, tc.wantProg, tc.wantHead)
			}
			if got := strings.Join(args[len(tc.wantHead)-1:], " "); got != strings.Join(tc.cfg.Args(1), " ") {
				t.Errorf("QEMU's arguments differ from Args:\n%s\n%s", got, strings.Join(tc.cfg.Args(1), " "))
			}
		})
	}
}

func TestCheckRejectsUserNetFeaturesOnATap(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"user net with hostfwd", Config{Name: "a", HostFwd: []string{"tcp:127.0.0.1:1-10.0.2.50:22"}}, ""},
		{"tap", Config{Name: "a", Tap: "kt-a", Netns: "kiln-t-x"}, ""},
		{"tap with hostfwd", Config{Name: "a", Tap: "kt-a", HostFwd: []string{"tcp:127.0.0.1:1-10.0.2.50:22"}}, "HostFwd"},
		{"tap with pxe from QEMU's tftp", Config{Name: "a", Tap: "kt-a", Boot: BootPXE, TFTPDir: "/t", BootFile: "kiln.ipxe"}, "TFTP"},
		{"tap with pxe from the segment's dhcp", Config{Name: "a", Tap: "kt-a", Boot: BootPXE}, ""},
		{"tap with a tftp dir", Config{Name: "a", Tap: "kt-a", TFTPDir: "/t"}, "TFTP"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Check()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one naming %s", err, tc.wantErr)
			}
			if tc.wantErr != "" {
				if _, err := Start(tc.cfg); err == nil {
					t.Fatal("Start accepted the config")
				}
			}
		})
	}
}
