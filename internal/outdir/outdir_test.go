package outdir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestMarkerRoundTrips(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := ReadMarker(dir); ok || err != nil {
		t.Fatalf("empty dir: ok=%v err=%v, want no marker", ok, err)
	}
	m := Marker{Kind: "kiln gen", Paths: []string{"nodes/b.ign", "admin.kubeconfig", "nodes/a.ign", "admin.kubeconfig"}}
	if err := WriteMarker(dir, m); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, MarkerName))
	if want := "kiln gen\nadmin.kubeconfig\nnodes/a.ign\nnodes/b.ign\n"; string(data) != want {
		t.Errorf("marker file = %q, want %q", data, want)
	}
	got, ok, err := ReadMarker(dir)
	if !ok || err != nil || got.Kind != "kiln gen" || !slices.Equal(got.Paths, []string{"admin.kubeconfig", "nodes/a.ign", "nodes/b.ign"}) {
		t.Errorf("read back %+v ok=%v err=%v", got, ok, err)
	}
}

func TestSetHoldsPathsAndTheirDirectories(t *testing.T) {
	s := NewSet("pxe/vmlinuz", "node.iso")
	for rel, want := range map[string]bool{"pxe": true, "pxe/vmlinuz": true, "node.iso": true, "pxe/other": false, "node.raw": false, ".": false} {
		if s.Has(rel) != want {
			t.Errorf("Has(%q) = %v, want %v", rel, !want, want)
		}
	}
}

func TestForeignNamesTheFirstUnclaimedEntry(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"nodes/a.ign", "nodes/notes.txt"} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(root, p), nil, 0o644)
	}
	owned := NewSet("nodes/a.ign")
	claim := func(rel string, _ fs.DirEntry) bool { return owned.Has(rel) }
	if got, err := Foreign(root, claim); err != nil || got != "nodes/notes.txt" {
		t.Errorf("Foreign = %q, %v; want nodes/notes.txt", got, err)
	}
	os.Remove(filepath.Join(root, "nodes/notes.txt"))
	if got, err := Foreign(root, claim); err != nil || got != "" {
		t.Errorf("Foreign = %q, %v; want nothing", got, err)
	}
}

func TestResolveAndWithin(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(root, "real", "pki"), 0o755)
	os.Symlink(filepath.Join(root, "real"), filepath.Join(root, "link"))
	got, err := Resolve(filepath.Join(root, "link", "pki", "missing", "deeper"))
	if want := filepath.Join(root, "real", "pki", "missing", "deeper"); err != nil || got != want {
		t.Fatalf("Resolve = %q, %v; want %q", got, err, want)
	}
	pki := filepath.Join(root, "real", "pki")
	for p, want := range map[string]bool{pki: true, filepath.Join(pki, "x"): true, root: false, filepath.Join(root, "real", "pki2"): false} {
		if Within(p, pki) != want {
			t.Errorf("Within(%s, %s) = %v, want %v", p, pki, !want, want)
		}
	}
}

func TestRefusalNamesPathWhatAndWayOut(t *testing.T) {
	var err error = &Refusal{Path: "out/x", What: "is a regular file", WayOut: "choose another"}
	var r *Refusal
	if !errors.As(err, &r) || !strings.Contains(err.Error(), "out/x: it is a regular file; choose another") {
		t.Errorf("refusal reads %q", err)
	}
}
