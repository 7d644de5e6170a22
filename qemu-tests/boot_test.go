package qemutests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/firstboot/source"
	"github.com/kiln-project/kiln/firstboot/state"
	"github.com/kiln-project/kiln/internal/ignition"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

const (
	doneLine  = `kiln-firstboot: done source=`
	errorLine = `kiln-firstboot: error: `
	probeLine = `probe: boot=`
)

// Scenario 1: the ISO under SeaBIOS and under OVMF applies the config's
// files, user and units; under OVMF the config also names a blank disk
// for the state partition. Each config carries the Ignition conformance
// cases of its spec version (3.0 and 3.1), whose checks must pass.
func TestISOAppliesConfig(t *testing.T) {
	t.Parallel() // each subtest is a one-vCPU boot (parallelBoot)
	out := outDir(t)
	for _, tc := range []struct {
		name      string
		fw        vm.Firmware
		stateDisk string
		wantState string
		spec      string // the config's Ignition spec version
	}{
		{"bios", vm.BIOS, "", "ram", "3.0.0"},
		{"uefi", vm.UEFI, "/dev/vda", "/dev/vda1", "3.1.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parallelBoot(t)
			dir := logDir(t, out)
			cfg := vm.Config{CPUs: 1, Name: "iso-" + tc.name, Dir: dir, Firmware: tc.fw, Boot: vm.BootISO,
				ISO: filepath.Join(out, "node.iso"), Ignition: conformanceConfig(t, tc.spec, tc.stateDisk)}
			if tc.stateDisk != "" {
				disk := filepath.Join(dir, "state.qcow2")
				qemuImg(t, "create", "-q", "-f", "qcow2", disk, "2G")
				cfg.Disks = []vm.Disk{{Path: disk, Format: "qcow2"}}
			}
			v := startVM(t, cfg)
			if got := waitLine(t, v, doneLine); !strings.HasSuffix(got, "source=fw_cfg") {
				t.Errorf("final line %q, want source=fw_cfg", got)
			}
			t.Logf("power-on to done: %s", v.Uptime().Round(time.Second))
			expectFields(t, waitLine(t, v, probeLine), map[string]string{
				"hello": "world", "user": "ops", "keys": "1", "host": "kiln-test",
				"marker": "absent", "drift": "absent", "once": "1", "state": tc.wantState,
			})
			expectConformance(t, v)
		})
	}
}

// Scenario 2: the raw disk under OVMF makes its state partition in the
// disk's free space; after a power cut it boots with no config source,
// re-applies the stored config, keeps /var/lib/kiln, loses /etc drift and
// does not repeat one-time steps. The config (spec 3.2) carries kiln's
// Ignition conformance suite: its checks pass on both boots.
func TestRawDiskSurvivesPowerCut(t *testing.T) {
	parallelBoot(t)
	out := outDir(t)
	dir := logDir(t, out)
	disk := filepath.Join(dir, "node.raw")
	copyFile(t, filepath.Join(out, "node.raw"), disk)
	qemuImg(t, "resize", "-q", "-f", "raw", disk, "3G")
	v := startVM(t, vm.Config{CPUs: 1, Name: "raw", Dir: dir, Firmware: vm.UEFI, Boot: vm.BootDisk,
		Disks: []vm.Disk{{Path: disk, Format: "raw"}}, Ignition: conformanceConfig(t, "3.2.0", "")})

	first, err := v.BootID(t.Context(), bootTimeout)
	if err != nil {
		t.Fatal(err)
	}
	waitLine(t, v, doneLine+"fw_cfg")
	p1 := waitLine(t, v, probeLine)
	expectFields(t, p1, map[string]string{"marker": "absent", "drift": "absent", "once": "1", "hello": "world", "state": "/dev/vda4"})
	expectConformance(t, v)
	waitLine(t, v, `probe-synced`) // the marker is on disk: now cut the power

	v.Ignition = nil // no config source at all on the second boot
	if err := v.Restart(); err != nil {
		t.Fatal(err)
	}
	second, err := v.BootID(t.Context(), bootTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatalf("boot id unchanged after the power cut: %s", first)
	}
	waitLine(t, v, doneLine+"state")
	p2 := waitLine(t, v, probeLine)
	expectFields(t, p2, map[string]string{"marker": "present", "drift": "absent", "once": "1", "hello": "world", "user": "ops", "state": "/dev/vda4"})
	expectConformance(t, v)
	if _, ok := v.Find(regexp.MustCompile(`state partition created`)); ok {
		t.Error("the second boot created the state partition again")
	}
	v.PowerCut()
	expectStateLayout(t, disk)
	panickingTryRollsBack(t, v, disk)
}

// expectStateLayout reads the layout record of the state partition the
// agent made (partition 4 of the powered-off disk): this kiln's layout,
// and the kiln that wrote it.
func expectStateLayout(t *testing.T, disk string) {
	t.Helper()
	start, err := exec.Command("partx", "-g", "-o", "START", "-n", "4", disk).Output()
	if err != nil {
		t.Fatalf("partx: the state partition of %s: %v", disk, err)
	}
	sector, err := strconv.ParseInt(strings.TrimSpace(string(start)), 10, 64)
	if err != nil {
		t.Fatalf("partx: %q: %v", start, err)
	}
	cmd := exec.Command("debugfs", "-R", "cat /"+state.LayoutFile, fmt.Sprintf("%s?offset=%d", disk, sector*512))
	data, err := cmd.Output()
	var rec struct {
		Layout    int    `json:"layout"`
		WrittenBy string `json:"writtenBy"`
	}
	if err != nil || json.Unmarshal(data, &rec) != nil || rec.Layout != state.Layout || rec.WrittenBy == "" {
		t.Errorf("the state partition's %s: %q (%v); want layout %d and the kiln that wrote it", state.LayoutFile, data, err, state.Layout)
		return
	}
	t.Logf("state partition: layout %d, written by kiln %s", rec.Layout, rec.WrittenBy)
}

// panickingTryRollsBack stages slot b on the powered-off raw disk with an
// initrd the kernel cannot use: GRUB tries b once (saving its tries as
// 0 first), the kernel panics for want of a root, and the boot after comes
// back on slot a, where kiln-boot-slot says the rollback on the console
// and writes it into the record.
func panickingTryRollsBack(t *testing.T, v *vm.VM, disk string) {
	t.Helper()
	v.PowerCut()
	r, err := bootslot.Decode(readESPFile(t, disk, bootslot.EnvPath))
	if err != nil {
		t.Fatalf("the record the builder and two boots left: %v", err)
	}
	if r.State() != "active a" || r.SlotA.Version == "" {
		t.Fatalf("the record after two boots of slot a: %s (slot a %+v)", r.State(), r.SlotA)
	}
	broken := bootslot.Image{Version: "broken-initrd", Digest: "sha256-" + strings.Repeat("0", 64)}
	r, err = bootslot.Stage(r, bootslot.B, broken)
	if err == nil {
		r, err = bootslot.StageWritten(r, bootslot.B, broken.Digest)
	}
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kernel := filepath.Join(dir, "vmlinuz")
	if err := os.WriteFile(kernel, readESPFile(t, disk, bootslot.A.Kernel()), 0o644); err != nil {
		t.Fatal(err)
	}
	writeESPFile(t, disk, bootslot.B.Kernel(), kernel)
	junk := filepath.Join(dir, "initrd.img")
	if err := os.WriteFile(junk, []byte("not an initramfs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeESPFile(t, disk, bootslot.B.Initrd(), junk)
	rec, err := bootslot.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	env := filepath.Join(dir, "grubenv")
	if err := os.WriteFile(env, rec, 0o644); err != nil {
		t.Fatal(err)
	}
	writeESPFile(t, disk, bootslot.EnvPath, env)

	if err := v.Restart(); err != nil {
		t.Fatal(err)
	}
	waitLine(t, v, `Kernel panic - not syncing`)
	v.PowerCut() // the guest reboots by itself (panic=10); QEMU runs with -no-reboot
	if err := v.Restart(); err != nil {
		t.Fatal(err)
	}
	waitLine(t, v, `kiln: rolled back from b to a: its trying boot ended before it was marked good`)
	waitLine(t, v, doneLine+"state")
	after, err := bootslot.Decode(readESPFile(t, disk, bootslot.EnvPath))
	if err != nil {
		t.Fatal(err)
	}
	if after.State() != "active a" || after.LastRollback.From != bootslot.B {
		t.Errorf("the record after the rollback: %s, last rollback %+v", after.State(), after.LastRollback)
	}
}

// Scenario 3: PXE under SeaBIOS and under OVMF, both through iPXE:
// kernel, initramfs and root come over HTTP from a server on the host's
// loopback (10.0.2.2 inside QEMU's user network), and the config from
// ignition.config.url= pinned by kiln.config.hash=. Without the hash the
// plain-http config is refused: the console says why and nothing is
// applied. The configs carry the conformance cases of spec 3.3 and 3.5.
func TestPXEFetchesConfigFromURL(t *testing.T) {
	t.Parallel() // each subtest is a one-vCPU boot (parallelBoot)
	out := outDir(t)
	rootfsHash := "sha256-" + artifactSHA256(t, out, "pxe/rootfs.squashfs")
	for _, tc := range []struct {
		name   string
		fw     vm.Firmware
		pinned bool
		spec   string // the config's Ignition spec version
		// rootfs: how the root image is checked (kiln.rootfs.hash=):
		// "" not at all, "pinned" its digest given, "tampered" its
		// digest given and a changed copy served.
		rootfs string
	}{
		{"bios", vm.BIOS, true, "3.3.0", "pinned"},
		{"uefi", vm.UEFI, true, "3.5.0", ""},
		{"bios-unpinned", vm.BIOS, false, "3.4.0", ""},
		{"bios-tampered-rootfs", vm.BIOS, true, "3.3.0", "tampered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parallelBoot(t)
			dir := logDir(t, out)
			ign := conformanceConfig(t, tc.spec, "")
			pxeDir := filepath.Join(out, "pxe")
			if tc.rootfs == "tampered" {
				pxeDir = tamperedPXE(t, pxeDir)
			}
			pxe, err := vm.ServePXE(pxeDir, dir, map[string][]byte{"config.ign": ign}, func(p *vm.PXEServer) string {
				args := "ignition.config.url=" + p.GuestURL("config.ign")
				if tc.pinned {
					args += " " + source.HashArg + "=" + ignition.Hash(ign)
				}
				if tc.rootfs != "" {
					args += " kiln.rootfs.hash=" + rootfsHash
				}
				return args
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pxe.Close)
			v := startVM(t, vm.Config{CPUs: 1, Name: "pxe-" + tc.name, Dir: dir, Firmware: tc.fw, Boot: vm.BootPXE,
				TFTPDir: pxe.TFTPDir, BootFile: pxe.BootFile, MemoryMiB: 2048})
			switch {
			case !tc.pinned:
				expectNothingApplied(t, v, "refusing the config from "+pxe.GuestURL("config.ign")+": nothing verifies it")
				return
			case tc.rootfs == "tampered":
				expectRootfsRefused(t, v, rootfsHash)
				return
			case tc.rootfs == "pinned":
				t.Logf("rootfs check: %s", waitLine(t, v, `kiln: root image .* matches kiln.rootfs.hash \(`+regexp.QuoteMeta(rootfsHash)+`\)`))
			}
			waitLine(t, v, doneLine+"url")
			t.Logf("power-on to done: %s", v.Uptime().Round(time.Second))
			expectFields(t, waitLine(t, v, probeLine), map[string]string{"hello": "world", "user": "ops", "state": "ram"})
			expectConformance(t, v)
		})
	}
}

// artifactSHA256 is an artifact's sha256 as the build's manifest lists it.
func artifactSHA256(t *testing.T, out, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(out, "node.manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Artifacts []struct{ Path, SHA256 string }
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for _, a := range m.Artifacts {
		if a.Path == path {
			return a.SHA256
		}
	}
	t.Fatalf("node.manifest.json lists no %s", path)
	return ""
}

// tamperedPXE is a copy of the PXE directory whose root image has one
// byte changed in its tail padding: it still mounts, but its digest is
// not the build's.
func tamperedPXE(t *testing.T, pxeDir string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"vmlinuz", "initrd.img", "boot.ipxe"} {
		if err := os.Link(filepath.Join(pxeDir, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(filepath.Join(pxeDir, "rootfs.squashfs"))
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] ^= 0xff
	if err := os.WriteFile(filepath.Join(dir, "rootfs.squashfs"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// expectRootfsRefused waits for the initramfs to refuse the root image
// by its digest, naming the digest it wanted, and checks that the agent
// in that image never ran.
func expectRootfsRefused(t *testing.T, v *vm.VM, want string) {
	t.Helper()
	line := waitLine(t, v, `kiln: root image .* has digest sha256-[0-9a-f]{64}, not `+regexp.QuoteMeta(want)+` \(kiln.rootfs.hash\): not booting it`)
	t.Logf("refused: %s", line)
	time.Sleep(20 * time.Second)
	if l, ok := v.Find(regexp.MustCompile(`kiln-firstboot`)); ok {
		t.Errorf("the agent of a refused root image ran: %q", l)
	}
}

// expectNothingApplied waits for the agent's error line, which must
// contain want, then makes sure no config was applied.
func expectNothingApplied(t *testing.T, v *vm.VM, want string) {
	t.Helper()
	line := waitLine(t, v, errorLine)
	if !strings.Contains(line, want) {
		t.Errorf("error line %q does not say %q", line, want)
	}
	// Proving that nothing happened needs a bounded wait: the agent has
	// exited with its error line, and a unit an applied config enabled
	// would print within seconds of it. No later console line marks the
	// end of this boot: systemd's status lines do not reliably
	// reach the console, and the login prompt comes before the agent ends.
	time.Sleep(30 * time.Second)
	for _, re := range []string{probeLine, doneLine} {
		if l, ok := v.Find(regexp.MustCompile(re)); ok {
			t.Errorf("a refused config was applied: console shows %q", l)
		}
	}
}

// Scenario 4: an invalid config prints its report and the error line and
// applies nothing: no file, no user, no probe.
func TestInvalidConfigChangesNothing(t *testing.T) {
	parallelBoot(t)
	out := outDir(t)
	dir := logDir(t, out)
	v := startVM(t, vm.Config{CPUs: 1, Name: "invalid", Dir: dir, Firmware: vm.BIOS, Boot: vm.BootISO,
		ISO: filepath.Join(out, "node.iso"), Ignition: mustJSON(t, invalidConfig())})
	expectNothingApplied(t, v, "invalid config from fw_cfg")
	t.Logf("report: %s", waitLine(t, v, `kiln-firstboot: config: .*storage\.files\.2\.path`))
}
