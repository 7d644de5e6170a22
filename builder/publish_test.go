package builder

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/images"
	"github.com/kiln-project/kiln/internal/outdir"
	"github.com/kiln-project/kiln/internal/treetest"
)

// What make image's out/ holds beside the artifacts: the tests' logs.
var unrelated = []string{"qemu-logs/iso-bios.log", "qemu-test.log", "cluster-test.log", "soak.log"}

// Every artifact path the default spec writes that holds something kiln
// did not write is refused, naming it, and nothing in out changes.
func TestCheckOutputRefusesWhatKilnDidNotWrite(t *testing.T) {
	spec := defaultSpec(t)
	for _, tc := range []struct {
		name   string
		setup  func(t *testing.T, out string)
		refuse string // the path named, relative to out's parent
		says   string
	}{
		{"output is a regular file", func(t *testing.T, out string) {
			writeTree(t, filepath.Dir(out), filepath.Base(out))
		}, "out", "is a file, not a directory"},
		{"an operator's node.iso, nothing else", func(t *testing.T, out string) {
			writeTree(t, out, ISOName)
		}, "out/node.iso", "kiln did not write it"},
		{"node.iso beside a manifest that is not kiln's", func(t *testing.T, out string) {
			writeTree(t, out, ISOName, ManifestName)
		}, "out/node.iso", "kiln did not write it"},
		{"an older output's manifest does not list node.raw", func(t *testing.T, out string) {
			writeTree(t, out, ISOName, RawName)
			writeManifest(t, out, ISOName)
		}, "out/node.raw", "kiln did not write it"},
		{"an operator's file in pxe/", func(t *testing.T, out string) {
			writeTree(t, out, "pxe/vmlinuz", "pxe/menu.ipxe")
			outdir.WriteMarker(out, outdir.Marker{Kind: MarkerKind, Paths: []string{"pxe/vmlinuz"}})
		}, "out/pxe/menu.ipxe", "replaces pxe/ as a whole"},
		{"a file where pxe/ goes", func(t *testing.T, out string) {
			writeTree(t, out, PXEDir)
			outdir.WriteMarker(out, outdir.Marker{Kind: MarkerKind, Paths: []string{"pxe/vmlinuz"}})
		}, "out/pxe", "kiln did not write it"},
		{"a symbolic link at node.iso", func(t *testing.T, out string) {
			writeTree(t, out, "elsewhere.iso")
			os.Symlink("elsewhere.iso", filepath.Join(out, ISOName))
			outdir.WriteMarker(out, outdir.Marker{Kind: MarkerKind, Paths: []string{ISOName}})
		}, "out/node.iso", "kiln did not write it"},
		{"kiln gen's output", func(t *testing.T, out string) {
			writeTree(t, out, "nodes/m1.ign")
			outdir.WriteMarker(out, outdir.Marker{Kind: "kiln gen", Paths: []string{"nodes/m1.ign"}})
		}, "out", `holds the output of "kiln gen"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			out := filepath.Join(parent, "out")
			tc.setup(t, out)
			before := treetest.Snapshot(t, parent)
			err := CheckOutput(out, spec)
			named := filepath.Join(parent, tc.refuse)
			var r *outdir.Refusal
			if !errors.As(err, &r) || r.Path != named || !strings.Contains(err.Error(), named+": it") || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v, want a refusal naming %s that %s", err, named, tc.says)
			}
			if stage := stageAll(t); publish(stage, out, artifactNames(spec)) == nil {
				t.Error("publish went ahead where CheckOutput refused")
			}
			treetest.Unchanged(t, parent, before)
		})
	}
}

// A build refuses its output before it locks the cache or runs a tool.
func TestBuildRefusesBeforeAnythingRuns(t *testing.T) {
	parent := t.TempDir()
	out, cache := filepath.Join(parent, "out"), filepath.Join(parent, "cache")
	writeTree(t, out, ISOName)
	before := treetest.Snapshot(t, parent)
	r := &failingRunner{}
	err := Build(context.Background(), Options{Spec: defaultSpec(t), OutDir: out, CacheDir: cache, KilnBinary: os.Args[0], Runner: r})
	var refusal *outdir.Refusal
	if !errors.As(err, &refusal) {
		t.Fatalf("err = %v, want a refusal", err)
	}
	if len(r.cmds) > 0 {
		t.Errorf("the build ran %v", r.cmds)
	}
	treetest.Unchanged(t, parent, before)
}

// Missing, empty, holding only other files, an older kiln's output, its
// own marked output: all accepted.
func TestCheckOutputAcceptsItsOwnAndOtherFilesBeside(t *testing.T) {
	spec := defaultSpec(t)
	for name, setup := range map[string]func(t *testing.T, out string){
		"missing":         func(t *testing.T, out string) {},
		"empty":           func(t *testing.T, out string) { os.MkdirAll(out, 0o755) },
		"only test logs":  func(t *testing.T, out string) { writeTree(t, out, unrelated...) },
		"an empty pxe/":   func(t *testing.T, out string) { os.MkdirAll(filepath.Join(out, PXEDir), 0o755) },
		"an older output": func(t *testing.T, out string) { olderOutput(t, out) },
		"its marked output": func(t *testing.T, out string) {
			writeTree(t, out, append([]string{ISOName, ManifestName, "pxe/vmlinuz"}, unrelated...)...)
			outdir.WriteMarker(out, outdir.Marker{Kind: MarkerKind, Paths: []string{ISOName, ManifestName, "pxe/vmlinuz"}})
		},
	} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			setup(t, out)
			if err := CheckOutput(out, spec); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The first build after the marker replaces an older kiln's artifacts,
// the next replaces its own; the logs beside them are never touched, and
// an artifact the spec no longer asks for stays, still kiln's.
func TestPublishReplacesItsOwnArtifactsAndLeavesTheRest(t *testing.T) {
	parent := t.TempDir()
	out := filepath.Join(parent, "out")
	olderOutput(t, out)
	writeTree(t, out, unrelated...)
	logs := treetest.Snapshot(t, filepath.Join(out, "qemu-logs"))
	testLog, _ := os.ReadFile(filepath.Join(out, "qemu-test.log"))

	if err := publish(stageAll(t), out, []string{ISOName, RawName, PXEDir, ManifestName}); err != nil {
		t.Fatalf("first publish over an older output: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "pxe/old.ipxe")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the older pxe/old.ipxe survived the swap: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(out, ISOName)); string(got) != "new "+ISOName {
		t.Errorf("node.iso = %q, want the new one", got)
	}
	wantMarker(t, out, ISOName, ManifestName, RawName, "pxe/boot.ipxe", "pxe/vmlinuz")

	stage := stageAll(t)
	os.Remove(filepath.Join(stage, RawName))
	if err := publish(stage, out, []string{ISOName, PXEDir, ManifestName}); err != nil {
		t.Fatalf("publish over its own output: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(out, RawName)); string(got) != "new "+RawName {
		t.Errorf("node.raw, not asked for this time, = %q", got)
	}
	wantMarker(t, out, ISOName, ManifestName, RawName, "pxe/boot.ipxe", "pxe/vmlinuz")
	treetest.Unchanged(t, filepath.Join(out, "qemu-logs"), logs)
	if got, _ := os.ReadFile(filepath.Join(out, "qemu-test.log")); string(got) != string(testLog) {
		t.Error("qemu-test.log changed")
	}
}

// A publish cut short after the first rename leaves an output the next
// build recognises as its own: the marker is written first.
func TestInterruptedPublishLeavesItsOwnOutput(t *testing.T) {
	out := t.TempDir()
	stage := stageAll(t)
	manifest := filepath.Join(stage, ManifestName)
	os.Remove(manifest)
	os.Symlink("vanished", manifest) // listed, then gone when its turn comes
	if err := publish(stage, out, []string{ISOName, ManifestName}); err == nil {
		t.Fatal("publish without a staged manifest succeeded")
	}
	if _, err := os.Stat(filepath.Join(out, ISOName)); err != nil {
		t.Fatalf("node.iso was not published before the failure: %v", err)
	}
	if err := CheckOutput(out, defaultSpec(t)); err != nil {
		t.Errorf("the next build refuses the half-published output: %v", err)
	}
}

func defaultSpec(t *testing.T) *images.Spec {
	t.Helper()
	spec, err := images.Load("")
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// olderOutput is out as a kiln from before the marker left it.
func olderOutput(t *testing.T, out string) {
	writeTree(t, out, ISOName, RawName, "pxe/vmlinuz", "pxe/old.ipxe")
	writeManifest(t, out, ISOName, RawName, "pxe/vmlinuz", "pxe/old.ipxe")
}

// stageAll is a staging directory with every artifact of the default
// spec, each holding "new <path>".
func stageAll(t *testing.T) string {
	t.Helper()
	stage := t.TempDir()
	for _, p := range []string{ISOName, RawName, "pxe/vmlinuz", "pxe/boot.ipxe", ManifestName} {
		writeFile(t, filepath.Join(stage, p), "new "+p)
	}
	return stage
}

func writeManifest(t *testing.T, out string, artifacts ...string) {
	t.Helper()
	m := Manifest{Name: "node", SpecSHA256: "abc"}
	for _, a := range artifacts {
		m.Artifacts = append(m.Artifacts, FileDigest{Path: a})
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(out, ManifestName), string(data))
}

func wantMarker(t *testing.T, out string, paths ...string) {
	t.Helper()
	m, ok, err := outdir.ReadMarker(out)
	slices.Sort(paths)
	if !ok || err != nil || m.Kind != MarkerKind || !slices.Equal(m.Paths, paths) {
		t.Errorf("marker %+v (ok=%v, %v), want kind %q listing %v", m, ok, err, MarkerKind, paths)
	}
}

// writeTree creates each file under root with its own path as content.
func writeTree(t *testing.T, root string, files ...string) {
	t.Helper()
	for _, f := range files {
		writeFile(t, filepath.Join(root, f), f)
	}
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
