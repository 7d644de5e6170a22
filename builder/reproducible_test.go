package builder

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/builder/gobuild"
	"github.com/kiln-project/kiln/images"
)

// TestRebuildIsByteIdentical builds the default image again, from the
// same spec, kiln binary (and its version, which the raw disk's
// boot-state record holds) and cached base, and compares every artifact's
// sha256 with the manifest of the build in KILN_OUT. make qemu-test runs it
// (KILN_REBUILD=1) after make image; it needs root and takes minutes.
func TestRebuildIsByteIdentical(t *testing.T) {
	out, bin := os.Getenv("KILN_OUT"), os.Getenv("KILN_BIN")
	if os.Getenv("KILN_REBUILD") != "1" || out == "" || bin == "" {
		t.Skip("set KILN_REBUILD=1, KILN_OUT and KILN_BIN (make qemu-test does)")
	}
	want := readManifest(t, filepath.Join(out, ManifestName))
	spec, err := images.Load("")
	if err != nil {
		t.Fatal(err)
	}
	again := t.TempDir()
	cache := gobuild.DefaultCacheDir()
	opts := Options{Spec: spec, OutDir: again, CacheDir: cache, KilnBinary: bin, Version: kilnVersion(t, bin), Progress: io.Discard}
	if err := Build(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	got := readManifest(t, filepath.Join(again, ManifestName))
	if len(got.Artifacts) != len(want.Artifacts) {
		t.Fatalf("rebuild made %d artifacts, the first build %d", len(got.Artifacts), len(want.Artifacts))
	}
	for i, a := range want.Artifacts {
		if g := got.Artifacts[i]; g != a {
			t.Errorf("%s differs: first build %s (%d bytes), rebuild %s (%d bytes)", a.Path, a.SHA256, a.Size, g.SHA256, g.Size)
		}
	}
}

// kilnVersion is the version the kiln binary at bin says it is, which
// kiln build passes as Options.Version.
func kilnVersion(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", bin, err)
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "kiln version ")
	if !ok {
		t.Fatalf("%s --version said %q, not kiln version <version>", bin, out)
	}
	return v
}

func readManifest(t *testing.T, path string) Manifest {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}
