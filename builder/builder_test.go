package builder

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/images"
	"github.com/kiln-project/kiln/internal/golden"
)

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	golden.Check(t, filepath.Join("testdata", name), []byte(got))
}

func TestBootConfigsGolden(t *testing.T) {
	extra := []string{"quiet"}
	checkGolden(t, "isolinux.cfg", isolinuxCfg(ISOCmdline(extra)))
	checkGolden(t, "grub-iso.cfg", grubBootCfg(ISOCmdline(extra)))
	checkGolden(t, "grub-raw.cfg", grubBootCfg(RawCmdline(extra)))
	checkGolden(t, "grub-embedded.cfg", grubEmbedded)
	checkGolden(t, "boot.ipxe", ipxeScript(extra))
}

func TestSerialConsoleIsLastSoTheAgentLineReachesIt(t *testing.T) {
	for _, c := range []string{ISOCmdline(nil), RawCmdline(nil)} {
		f := strings.Fields(c)
		if f[len(f)-1] != "console=ttyS0,115200" {
			t.Errorf("%q: the last console= must be the serial port", c)
		}
	}
}

func TestRawLayoutIsAlignedAndFitsItsContent(t *testing.T) {
	for _, tc := range []struct{ esp, root int64 }{{70 * mib, 375 * mib}, {1, 1}, {200*mib + 3, 1*mib + 1}} {
		l := rawLayout(tc.esp, tc.root)
		if l.espStart*512%uint64(mib) != 0 || l.rootStart*512%uint64(mib) != 0 {
			t.Errorf("%+v: partitions not 1 MiB aligned", l)
		}
		espBytes := int64(l.espEnd-l.espStart+1) * 512
		rootBytes := int64(l.rootEnd-l.rootStart+1) * 512
		if espBytes < tc.esp || espBytes < minFAT32 || rootBytes < tc.root {
			t.Errorf("%+v: too small for esp %d root %d", l, tc.esp, tc.root)
		}
		if int64(l.rootEnd+1)*512+mib != l.total {
			t.Errorf("%+v: 1 MiB must remain after the root for the backup GPT", l)
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

// failingRunner makes every external command fail, as a broken tool would.
type failingRunner struct{ calls int }

func (f *failingRunner) Run(context.Context, Cmd) error {
	f.calls++
	return errors.New("tool exploded")
}

func TestFailedBuildLeavesOutputUntouched(t *testing.T) {
	if _, err := os.Stat("/usr/bin/dpkg-query"); err != nil {
		t.Skip("needs dpkg-query for the cache key")
	}
	out, cache := t.TempDir(), t.TempDir()
	previous := map[string]string{ISOName: "old iso", ManifestName: "old manifest"}
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
	if !strings.Contains(progress.String(), "[1/12] base root filesystem: failed after") {
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
