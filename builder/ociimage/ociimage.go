// Package ociimage packs static binaries into container image archives
// (docker-archive tarballs that `ctr images import` and `docker load`
// accept), reproducibly: fixed timestamps, sorted entries, no build
// host state. The node image carries these archives so no registry is
// needed at boot.
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one file of the image's single layer.
type File struct {
	Path   string // absolute path in the image
	Source string // file on the build host
	Mode   int64
}

// Spec describes one image.
type Spec struct {
	Ref        string // e.g. registry.k8s.io/kube-apiserver:v1.37.1
	Files      []File
	Entrypoint []string
	Created    time.Time // SOURCE_DATE_EPOCH
	// Level is the layer's gzip level; 0 means best compression. An
	// image packed again on every rebuild takes a faster level: gzip -6
	// of the 63 MB kiln binary is 0.8% larger than -9 and 3x as fast.
	Level int
}

// Result is a written archive and the image's identity.
type Result struct {
	Ref    string
	Digest string // manifest digest, sha256:...
	Path   string
}

// Write packs the spec into a docker-archive tarball at dst, written
// beside and renamed into place.
func Write(s Spec, dst string) (Result, error) {
	ref, err := name.NewTag(s.Ref, name.WeakValidation)
	if err != nil {
		return Result{}, fmt.Errorf("image %s: %w", s.Ref, err)
	}
	img, err := Build(s)
	if err != nil {
		return Result{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return Result{}, err
	}
	tmp := dst + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		os.Remove(tmp)
		return Result{}, fmt.Errorf("image %s: writing %s: %w", s.Ref, dst, err)
	}
	if err := syncFile(tmp); err != nil {
		return Result{}, err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return Result{}, err
	}
	return Result{Ref: ref.String(), Digest: digest.String(), Path: dst}, nil
}

// Build returns the image: one layer with the files, the entrypoint, and
// every timestamp set to s.Created.
func Build(s Spec) (v1.Image, error) {
	layerData, err := layerTar(s.Files, s.Created)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", s.Ref, err)
	}
	// gzip at best compression: the archive is packed once per content
	// (the builder caches it) and the node reads, hashes and stores the
	// compressed blob before it unpacks it. Uncompressed layers make the
	// squashfs 11 MB smaller, but a genesis node's import 2.3x as long
	// (every layer read, hashed and written at three times its gzip size
	// on a slow machine).
	// Compressed here, once: a layer given uncompressed is compressed by
	// the library each time it hashes or writes it, twice per archive
	// (gzip -9 of the 63 MB kiln binary takes 5 s here, on every rebuild
	// after a kiln change). The bytes are the compress/gzip output the
	// library made.
	level := s.Level
	if level == 0 {
		level = gzip.BestCompression
	}
	gz, err := gzipLevel(layerData, level)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", s.Ref, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = "amd64", "linux"
	cfg.Created = v1.Time{Time: s.Created}
	cfg.Config.Entrypoint = s.Entrypoint
	cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.CreatedAt(img, v1.Time{Time: s.Created})
}

// gzipLevel compresses data with compress/gzip at level and a zero
// header (no name, no time).
func gzipLevel(data []byte, level int) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, level)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// layerTar is the layer: parent directories then files, sorted, owned by
// root, all stamped with the same time.
func layerTar(files []File, mtime time.Time) ([]byte, error) {
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range sorted {
		if !path.IsAbs(f.Path) {
			return nil, fmt.Errorf("layer path %q is not absolute", f.Path)
		}
		for _, d := range parents(f.Path) {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
		}
		data, err := os.ReadFile(f.Source)
		if err != nil {
			return nil, fmt.Errorf("layer file %s: %w", f.Path, err)
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.Path[1:], Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// parents lists the directories above p, outermost first ("/usr/bin/x":
// "/usr", "/usr/bin").
func parents(p string) []string {
	var out []string
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		out = append([]string{d}, out...)
	}
	return out
}

func syncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
