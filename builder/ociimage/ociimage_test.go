package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestWriteIsReproducibleAndLoadable(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "pause")
	os.WriteFile(bin, []byte("#!/bin/sh\nexec sleep infinity\n"), 0o755)
	spec := Spec{
		Ref:        "kiln.local/pause:3.10",
		Files:      []File{{Path: "/usr/bin/pause", Source: bin}},
		Entrypoint: []string{"/usr/bin/pause"},
		Created:    time.Unix(1735689600, 0).UTC(),
	}
	a, err := Write(spec, filepath.Join(dir, "a.tar"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Write(spec, filepath.Join(dir, "b.tar"))
	if err != nil {
		t.Fatal(err)
	}
	da, _ := os.ReadFile(a.Path)
	db, _ := os.ReadFile(b.Path)
	if a.Digest != b.Digest || !bytes.Equal(da, db) {
		t.Errorf("two writes differ: %s vs %s", a.Digest, b.Digest)
	}

	tag, _ := name.NewTag(spec.Ref)
	img, err := tarball.ImageFromPath(a.Path, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Config.Entrypoint, spec.Entrypoint) || !cfg.Created.Time.Equal(spec.Created) || cfg.OS != "linux" {
		t.Errorf("config: entrypoint %v created %v os %s", cfg.Config.Entrypoint, cfg.Created, cfg.OS)
	}
	layers, _ := img.Layers()
	if len(layers) != 1 {
		t.Fatalf("%d layers", len(layers))
	}
	rc, _ := layers[0].Uncompressed()
	defer rc.Close()
	var names []string
	eachEntry(t, rc, func(h *tar.Header, _ io.Reader) {
		names = append(names, h.Name)
		if h.Name == "usr/bin/pause" && h.Mode != 0o755 {
			t.Errorf("mode %o", h.Mode)
		}
		if !h.ModTime.Equal(spec.Created) {
			t.Errorf("%s mtime %v", h.Name, h.ModTime)
		}
	})
	if want := []string{"usr/", "usr/bin/", "usr/bin/pause"}; !slices.Equal(names, want) {
		t.Errorf("layer entries %v, want %v", names, want)
	}
	if _, err := os.Stat(a.Path + ".tmp"); err == nil {
		t.Error("temporary archive left")
	}
}

func TestBadInput(t *testing.T) {
	for _, s := range []Spec{
		{Ref: "Not A Ref!", Files: nil},
		{Ref: "kiln.local/x:1", Files: []File{{Path: "relative", Source: "/dev/null"}}},
		{Ref: "kiln.local/x:1", Files: []File{{Path: "/x", Source: "/does/not/exist"}}},
	} {
		dst := filepath.Join(t.TempDir(), "x.tar")
		if _, err := Write(s, dst); err == nil {
			t.Errorf("%+v accepted", s)
		}
		if _, err := os.Stat(dst); err == nil {
			t.Errorf("%+v left an archive", s)
		}
	}
}

// TestLayerIsGzipped: the archive carries one gzip layer (containerd
// stores and hashes the compressed blob, a third of the tar's size) whose
// tar holds the files, at the spec's gzip level (best when none is given).
func TestLayerIsGzipped(t *testing.T) {
	for _, level := range []int{0, gzip.DefaultCompression, gzip.BestSpeed} {
		t.Run(fmt.Sprintf("level %d", level), func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "pause")
			os.WriteFile(bin, bytes.Repeat([]byte("pause "), 1000), 0o755)
			res, err := Write(Spec{Ref: "kiln.local/pause:3.10", Files: []File{{Path: "/pause", Source: bin}},
				Created: time.Unix(1735689600, 0).UTC(), Level: level}, filepath.Join(dir, "a.tar"))
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(res.Path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			layers := 0
			eachEntry(t, f, func(h *tar.Header, member io.Reader) {
				if !strings.HasSuffix(h.Name, ".tar.gz") {
					return
				}
				layers++
				zr, err := gzip.NewReader(member)
				if err != nil {
					t.Fatalf("layer %s is not gzip: %v", h.Name, err)
				}
				first, err := tar.NewReader(zr).Next()
				if err != nil {
					t.Fatalf("layer %s does not hold a tar: %v", h.Name, err)
				}
				if first.Name != "pause" {
					t.Errorf("layer %s starts with %q, want pause", h.Name, first.Name)
				}
			})
			if layers != 1 {
				t.Fatalf("found %d gzip layers in the archive, want 1", layers)
			}
		})
	}
}

// eachEntry calls fn with every entry of the tar stream r.
func eachEntry(t *testing.T, r io.Reader, fn func(h *tar.Header, data io.Reader)) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		fn(h, tr)
	}
}

// The layer is compressed once by kiln, not by the library on each use;
// the archive must be the very bytes the library's own gzip -9 made
// before, so archives cached and images built earlier stay valid. The
// digest was taken from the library-compressed build of this spec.
func TestArchiveDigestIsStable(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "pause")
	data := bytes.Repeat([]byte("kiln pause \x00\x01\x02 "), 50000)
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := Write(Spec{
		Ref:        "kiln.local/pause:3.10",
		Files:      []File{{Path: "/usr/bin/pause", Source: bin, Mode: 0o755}},
		Entrypoint: []string{"/usr/bin/pause"},
		Created:    time.Unix(1735689600, 0).UTC(),
	}, filepath.Join(dir, "a.tar"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "sha256:b5a8723aec52a147b9d36349c82d3f54a2860877b78e2d920edd965899689d5e"; res.Digest != want {
		t.Errorf("digest %s, want %s", res.Digest, want)
	}
}
