package imageseed

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/node/catalog"
)

// copyMount stands in for mount(8) in unit tests: it copies the seed
// tree it was made with onto the mount point, and counts the mounts.
type copyMount struct {
	seed   string
	mounts int
}

func (c *copyMount) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	if name != "mount" || len(args) != 6 {
		return nil, errors.New("unexpected command")
	}
	c.mounts++
	return nil, os.CopyFS(args[5], os.DirFS(c.seed))
}

// fakeSeed is a seed tree as Make leaves one: the manifest, containerd's
// metadata, a content blob and two snapshots.
func fakeSeed(t *testing.T, key string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		metadataDB:                       "bolt",
		contentDir + "/blobs/sha256/abc": "manifest",
		snapshotter + "/metadata.db":     "snapshots bolt",
		snapshotsDir + "/1/fs/bin/etcd":  "etcd",
		snapshotsDir + "/2/fs/coredns":   "coredns",
	}
	for p, data := range files {
		full := filepath.Join(dir, TreeDir, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := Manifest{Key: key, Containerd: "v2.2.9", Snapshots: []string{"1", "2"}, Images: []catalog.Image{
		{Role: "etcd", Ref: "kiln.local/etcd:v3.6.5", Digest: "sha256:e1"},
		{Role: "coredns", Ref: "kiln.local/coredns:v1.15.0", Digest: "sha256:c1"},
	}}
	data, _ := m.marshal()
	if err := os.WriteFile(filepath.Join(dir, ManifestName), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestPlant(t *testing.T) {
	for _, tc := range []struct {
		name string
		// store prepares containerd's store before the plant.
		store       func(t *testing.T, store string)
		wantPlanted bool
		wantAside   bool
		// kept is a file the plant must leave (moved, never deleted).
		kept string
	}{
		{name: "empty store (first boot)", store: func(*testing.T, string) {}, wantPlanted: true},
		{name: "no store directory yet", store: func(t *testing.T, s string) { os.RemoveAll(s) }, wantPlanted: true},
		{name: "planted from this seed before", store: func(t *testing.T, s string) {
			plantOnce(t, s)
		}},
		{name: "a plant a power cut interrupted (no metadata yet)", store: func(t *testing.T, s string) {
			os.MkdirAll(filepath.Join(s, contentDir, "blobs/sha256"), 0o755)
			os.WriteFile(filepath.Join(s, contentDir, "blobs/sha256/abc"), []byte("torn"), 0o644)
		}, wantPlanted: true},
		{name: "imported by a kiln without seeds", store: func(t *testing.T, s string) {
			os.MkdirAll(filepath.Join(s, "io.containerd.metadata.v1.bolt"), 0o755)
			os.WriteFile(filepath.Join(s, metadataDB), []byte("old bolt"), 0o644)
		}, wantPlanted: true, wantAside: true, kept: metadataDB},
		{name: "planted from another image's seed", store: func(t *testing.T, s string) {
			plantOnce(t, s)
			m, _ := ReadManifest(filepath.Join(s, Marker))
			m.Key = "another"
			data, _ := m.marshal()
			os.WriteFile(filepath.Join(s, Marker), data, 0o644)
		}, wantPlanted: true, wantAside: true, kept: Marker},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			store := filepath.Join(root, Store)
			os.MkdirAll(store, 0o711)
			os.MkdirAll(filepath.Join(root, filepath.Dir(Image)), 0o755)
			os.WriteFile(filepath.Join(root, Image), []byte("squashfs"), 0o644)
			tc.store(t, store)
			m := &copyMount{seed: fakeSeed(t, "k1")}
			p := &Planter{Root: root, Sys: m, Log: t.Logf, Now: func() time.Time { return time.Date(2026, 11, 26, 16, 0, 0, 0, time.UTC) }}
			res, err := p.Plant(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if res.Planted != tc.wantPlanted || (res.MovedAside != "") != tc.wantAside {
				t.Fatalf("planted %v, moved aside %q; want planted %v, aside %v", res.Planted, res.MovedAside, tc.wantPlanted, tc.wantAside)
			}
			if m.mounts != 1 {
				t.Errorf("mounted the seed %d times, want once", m.mounts)
			}
			checkPlanted(t, root)
			if tc.kept != "" {
				if _, err := os.Stat(filepath.Join(res.MovedAside, tc.kept)); err != nil {
					t.Errorf("the earlier store's %s is not in %s: %v", tc.kept, res.MovedAside, err)
				}
				if !strings.HasSuffix(res.MovedAside, "kiln-replaced-20261126T160000Z") {
					t.Errorf("moved aside to %s", res.MovedAside)
				}
			}
		})
	}
}

// plantOnce plants the fake seed into store (under its root).
func plantOnce(t *testing.T, store string) {
	t.Helper()
	root := strings.TrimSuffix(store, Store)
	os.MkdirAll(filepath.Join(root, filepath.Dir(Image)), 0o755)
	os.WriteFile(filepath.Join(root, Image), []byte("squashfs"), 0o644)
	p := &Planter{Root: root, Sys: &copyMount{seed: fakeSeed(t, "k1")}}
	if _, err := p.Plant(context.Background()); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(root, MountDir)) // the next Plant mounts again
}

// checkPlanted asserts the store is the seed's: files copied, snapshots
// linked into the mount, the images stamped, the marker last.
func checkPlanted(t *testing.T, root string) {
	t.Helper()
	store := filepath.Join(root, Store)
	for p, want := range map[string]string{metadataDB: "bolt", contentDir + "/blobs/sha256/abc": "manifest", snapshotter + "/metadata.db": "snapshots bolt"} {
		full := filepath.Join(store, p)
		if st, err := os.Lstat(full); err != nil || !st.Mode().IsRegular() {
			t.Errorf("%s: not a copied file (%v)", p, err)
			continue
		}
		if got, _ := os.ReadFile(full); string(got) != want {
			t.Errorf("%s holds %q, want %q", p, got, want)
		}
	}
	for id, file := range map[string]string{"1": "fs/bin/etcd", "2": "fs/coredns"} {
		link := filepath.Join(store, snapshotsDir, id)
		target, err := os.Readlink(link)
		if want := filepath.Join(root, MountDir, TreeDir, snapshotsDir, id); err != nil || target != want {
			t.Errorf("snapshot %s: link to %q (%v), want %q", id, target, err, want)
		}
		if _, err := os.Stat(filepath.Join(link, file)); err != nil {
			t.Errorf("snapshot %s: %v", id, err)
		}
	}
	for digest, ref := range map[string]string{"e1": "kiln.local/etcd:v3.6.5", "c1": "kiln.local/coredns:v1.15.0"} {
		if got, _ := os.ReadFile(filepath.Join(root, catalog.ImportedDir, digest)); strings.TrimSpace(string(got)) != ref {
			t.Errorf("stamp %s holds %q, want %s", digest, got, ref)
		}
	}
	var m Manifest
	data, _ := os.ReadFile(filepath.Join(store, Marker))
	if json.Unmarshal(data, &m); m.Key != "k1" {
		t.Errorf("marker %q, want the seed's key k1", data)
	}
}

func TestPlantWithoutASeed(t *testing.T) {
	p := &Planter{Root: t.TempDir(), Sys: &copyMount{}}
	if _, err := p.Plant(context.Background()); !errors.Is(err, ErrNoSeed) {
		t.Fatalf("got %v, want ErrNoSeed", err)
	}
}

func TestBrokenManifestsAreRefused(t *testing.T) {
	for name, body := range map[string]string{
		"not json":              "{",
		"no key":                `{"snapshots":["1"]}`,
		"a path for a snapshot": `{"key":"k","snapshots":["../../etc"]}`,
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), ManifestName)
			os.WriteFile(p, []byte(body), 0o644)
			if _, err := ReadManifest(p); err == nil || !strings.Contains(err.Error(), p) {
				t.Fatalf("got %v, want an error naming %s", err, p)
			}
		})
	}
}

func TestKeyIgnoresArchivePathsAndOrder(t *testing.T) {
	a := []catalog.Image{{Role: "etcd", Ref: "e:1", Digest: "sha256:1", Archive: "/a/etcd.tar"}, {Role: "pause", Ref: "p:1", Digest: "sha256:2"}}
	b := []catalog.Image{{Role: "pause", Ref: "p:1", Digest: "sha256:2", Archive: "/b"}, {Role: "etcd", Ref: "e:1", Digest: "sha256:1"}}
	if KeyFor("v2", "sum", a) != KeyFor("v2", "sum", b) {
		t.Error("the same images in another order or from other paths gave another key")
	}
	for name, k := range map[string]string{
		"another containerd binary": KeyFor("v2", "other", a),
		"another version":           KeyFor("v3", "sum", a),
		"another image digest":      KeyFor("v2", "sum", []catalog.Image{a[0], {Role: "pause", Ref: "p:1", Digest: "sha256:3"}}),
	} {
		if k == KeyFor("v2", "sum", a) {
			t.Errorf("%s gave the same key", name)
		}
	}
}
