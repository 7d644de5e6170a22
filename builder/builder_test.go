package builder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/contract/netboot"
	"github.com/kiln-project/kiln/images"
	"github.com/kiln-project/kiln/internal/golden"
	"github.com/kiln-project/kiln/internal/outdir"
)

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	golden.Check(t, filepath.Join("testdata", name), []byte(got))
}

func TestBootConfigsGolden(t *testing.T) {
	extra := []string{"quiet"}
	checkGolden(t, "isolinux.cfg", isolinuxCfg(ISOCmdline(extra)))
	checkGolden(t, "grub-iso.cfg", grubBootCfg(ISOCmdline(extra)))
	checkGolden(t, "grub-raw.cfg", rawBootCfg(extra))
	checkGolden(t, "grub-embedded.cfg", grubEmbedded)
	checkGolden(t, "boot.ipxe", ipxeScript(extra))
}

// kiln serve reads the spec's extra arguments back from boot.ipxe.
func TestSpecArgsReadBackFromBootIPXE(t *testing.T) {
	for _, extra := range [][]string{nil, {"quiet"}, {"quiet", "kiln.profile=slow"}} {
		got, ok := netboot.SpecArgs(ipxeScript(extra))
		if !ok || strings.Join(got, " ") != strings.Join(extra, " ") {
			t.Errorf("SpecArgs(ipxeScript(%q)) = %q, %v", extra, got, ok)
		}
	}
}

func TestSerialConsoleIsLastSoTheAgentLineReachesIt(t *testing.T) {
	slotB := strings.Join(bootslot.Cmdline(bootslot.B), " ")
	for _, c := range []string{ISOCmdline(nil), RawCmdline(nil), slotB} {
		last := ""
		for _, f := range strings.Fields(c) {
			if strings.HasPrefix(f, "console=") {
				last = f
			}
		}
		if last != "console=ttyS0,115200" {
			t.Errorf("%q: the last console= must be the serial port", c)
		}
	}
}

// The raw disk's command line is the one its GRUB script boots slot a
// with: the slot's arguments, then the spec's, which the script passes
// where the slot has no arguments file of its own.
func TestRawCmdlineIsSlotAsInTheScript(t *testing.T) {
	extra := []string{"quiet", "x=1"}
	script := bootslot.Script(extra)
	slotArgs := strings.Join(bootslot.Cmdline(bootslot.A), " ")
	for _, want := range []string{"linux " + bootslot.A.Kernel() + " " + slotArgs + " ${kiln_args}\n", "set kiln_args='quiet x=1'\n"} {
		if !strings.Contains(script, want) {
			t.Errorf("the script lacks %q:\n%s", want, script)
		}
	}
	if got, want := RawCmdline(extra), slotArgs+" quiet x=1"; got != want {
		t.Errorf("RawCmdline = %q, want %q", got, want)
	}
}

// Each slot holds the squashfs and half as much again, at least 256 MiB
// more, in 64 MiB steps, so a later, larger image fits the slot it is
// staged into.
func TestSlotSize(t *testing.T) {
	for _, tc := range []struct{ root, want int64 }{
		{1, 320 * mib},             // 256 MiB and a byte
		{64 * mib, 320 * mib},      // 64 + 256, on a step
		{348 * mib, 640 * mib},     // the default image: 348 + 256 = 604
		{384 * mib, 640 * mib},     // 384 + 256, on a step
		{384*mib + 1, 704 * mib},   // a byte over a step
		{512 * mib, 768 * mib},     // half of it is 256 MiB
		{512*mib + 2, 832 * mib},   // the half wins from here
		{1000*mib + 1, 1536 * mib}, // 1500 MiB and a byte
		{1024 * mib, 1536 * mib},   // 1024 + 512, on a step
		{4 << 30, 6 << 30},         // 4 GiB + 2 GiB
	} {
		got := slotSize(tc.root)
		if got != tc.want {
			t.Errorf("slotSize(%d MiB + %d) = %d MiB, want %d MiB", tc.root/mib, tc.root%mib, got/mib, tc.want/mib)
		}
		if got%(64*mib) != 0 || got < tc.root+tc.root/2 || got < tc.root+256*mib {
			t.Errorf("slotSize(%d) = %d: not a 64 MiB multiple with room for half as much again and 256 MiB", tc.root, got)
		}
	}
}

// The ESP holds GRUB, boot.cfg and the record, and three sets of a
// slot's kernel and initrd half as large again: the running slot's, and
// the staged slot's old and new ones while a stage replaces them.
func TestESPSize(t *testing.T) {
	for _, tc := range []struct{ common, slotBoot, want int64 }{
		{1 * mib, 52 * mib, 243 * mib},    // the default image: 1 + 3*78 + 8
		{1, 1, minFAT32 + 8*mib},          // the FAT32 floor
		{0, 8 * mib, minFAT32 + 8*mib},    // 36 + 8 is under the floor
		{0, 12 * mib, 62 * mib},           // 54 + 8
		{1*mib + 1, 100 * mib, 460 * mib}, // 1 MiB and a byte + 450 + 8, rounded up
	} {
		if got := espSize(tc.common, tc.slotBoot); got != tc.want {
			t.Errorf("espSize(%d, %d) = %d MiB + %d, want %d MiB", tc.common, tc.slotBoot, got/mib, got%mib, tc.want/mib)
		}
	}
}

func TestRawLayoutIsAlignedAndFitsItsContent(t *testing.T) {
	for _, tc := range []struct{ esp, root int64 }{{70 * mib, 375 * mib}, {1, 1}, {200*mib + 3, 1*mib + 1}} {
		l := rawLayout(1*mib, tc.esp, tc.root)
		size := func(p sectors) int64 { return int64(p.end-p.start+1) * 512 }
		for _, p := range []sectors{l.esp, l.rootA, l.rootB} {
			if p.start*512%uint64(mib) != 0 || (p.end+1)*512%uint64(mib) != 0 {
				t.Errorf("%+v: partitions not 1 MiB aligned", l)
			}
		}
		if l.esp.start != uint64(mib/512) || l.rootA.start != l.esp.end+1 || l.rootB.start != l.rootA.end+1 {
			t.Errorf("%+v: the partitions do not follow each other from 1 MiB", l)
		}
		if size(l.esp) != espSize(1*mib, tc.esp) || size(l.esp) < 1*mib+3*tc.esp || size(l.esp) < minFAT32 {
			t.Errorf("%+v: ESP of %d bytes, want espSize(1 MiB, %d)", l, size(l.esp), tc.esp)
		}
		if size(l.rootA) != slotSize(tc.root) || size(l.rootB) != slotSize(tc.root) {
			t.Errorf("%+v: slots of %d and %d bytes, want both slotSize(%d) = %d", l, size(l.rootA), size(l.rootB), tc.root, slotSize(tc.root))
		}
		if int64(l.rootB.end+1)*512+mib != l.total {
			t.Errorf("%+v: 1 MiB must remain after slot b for the backup GPT", l)
		}
	}
}

func TestGUIDsAreStablePerSpecAndPurpose(t *testing.T) {
	a, b := guid("hash1", "disk"), guid("hash1", "disk")
	if a != b || a == guid("hash1", "esp") || a == guid("hash2", "disk") {
		t.Fatalf("guid not a function of (spec, purpose): %s %s", a, b)
	}
	if len(a) != 36 || a[14] != '4' {
		t.Fatalf("%s is not a version-4 style GUID", a)
	}
}

// failingRunner answers dpkg-query (the cache key) and makes every other
// external command fail, as a broken tool would.
type failingRunner struct{ cmds []string }

func (f *failingRunner) Run(_ context.Context, c Cmd) error {
	f.cmds = append(f.cmds, c.Name)
	if c.Name == "dpkg-query" && c.Stdout != nil {
		_, err := io.WriteString(c.Stdout, "1.5.128")
		return err
	}
	return errors.New("tool exploded")
}

func TestFailedBuildLeavesOutputUntouched(t *testing.T) {
	out, cache := t.TempDir(), t.TempDir()
	previous := map[string]string{ISOName: "old iso", ManifestName: "old manifest",
		outdir.MarkerName: MarkerKind + "\n" + ISOName + "\n" + ManifestName + "\n"}
	for n, c := range previous {
		os.WriteFile(filepath.Join(out, n), []byte(c), 0o644)
	}
	// a leftover of an interrupted build is cleaned up
	os.MkdirAll(filepath.Join(out, ".kiln-build-123", "pxe"), 0o755)
	spec, err := images.Load("")
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	r := &failingRunner{}
	err = Build(context.Background(), Options{Spec: spec, OutDir: out, CacheDir: cache, KilnBinary: os.Args[0],
		Progress: &progress, Runner: r, Now: time.Now})
	if err == nil || !strings.Contains(err.Error(), `step "base root filesystem"`) || !strings.Contains(err.Error(), "tool exploded") {
		t.Fatalf("err = %v, want the failing step named with the tool's error", err)
	}
	if want := []string{"dpkg-query", "debootstrap"}; !slices.Equal(r.cmds, want) {
		t.Errorf("the build ran %q, want %q through its Runner", r.cmds, want)
	}
	if !strings.Contains(progress.String(), "[1/13] base root filesystem: failed after") {
		t.Errorf("progress does not report the failed step:\n%s", progress.String())
	}
	entries, _ := os.ReadDir(out)
	if len(entries) != len(previous) {
		t.Errorf("output dir holds %d entries, want only the %d previous artifacts", len(entries), len(previous))
	}
	for n, c := range previous {
		if got, _ := os.ReadFile(filepath.Join(out, n)); string(got) != c {
			t.Errorf("%s changed by a failed build: %q", n, got)
		}
	}
	if work, _ := os.ReadDir(filepath.Join(cache, "work")); len(work) != 0 {
		t.Errorf("scratch directories left in the cache: %v", work)
	}
}

func TestPublishSwapsDirectories(t *testing.T) {
	stage, out := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(out, PXEDir), 0o755)
	os.WriteFile(filepath.Join(out, PXEDir, "stale"), nil, 0o644)
	outdir.WriteMarker(out, outdir.Marker{Kind: MarkerKind, Paths: []string{PXEDir + "/stale"}})
	os.MkdirAll(filepath.Join(stage, PXEDir), 0o755)
	os.WriteFile(filepath.Join(stage, PXEDir, "vmlinuz"), []byte("k"), 0o644)
	os.WriteFile(filepath.Join(stage, ManifestName), []byte("{}"), 0o644)
	if err := publish(stage, out, []string{PXEDir, ManifestName}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, PXEDir, "stale")); !os.IsNotExist(err) {
		t.Error("old pxe/ content survived the swap")
	}
	if b, _ := os.ReadFile(filepath.Join(out, PXEDir, "vmlinuz")); string(b) != "k" {
		t.Error("new pxe/ content missing")
	}
}

// The base's cache key follows the host's debootstrap version, asked
// through the Runner, and the spec's packages in any order.
func TestRootfsKey(t *testing.T) {
	spec, err := images.Load("")
	if err != nil {
		t.Fatal(err)
	}
	key := func(version string, packages []string) string {
		t.Helper()
		s := *spec
		s.Packages = packages
		k, err := rootfsKey(context.Background(), versionRunner(version), &s)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	base := key("1.5.128", []string{"a", "b"})
	if key("1.5.128", []string{"b", "a"}) != base {
		t.Error("the package order changed the key")
	}
	if key("1.5.129", []string{"a", "b"}) == base || key("1.5.128", []string{"a", "c"}) == base {
		t.Error("another debootstrap or package list kept the key")
	}
}

// versionRunner answers dpkg-query with a debootstrap version.
type versionRunner string

func (v versionRunner) Run(_ context.Context, c Cmd) error {
	if c.Name != "dpkg-query" {
		return fmt.Errorf("unexpected %s", c.Name)
	}
	_, err := io.WriteString(c.Stdout, string(v))
	return err
}
