package builder

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/kiln-project/kiln/builder/imageseed"
	"github.com/kiln-project/kiln/contract/netboot"
	"github.com/kiln-project/kiln/node/catalog"
)

// Manifest says what an image holds. It is written last, next to the
// artifacts it describes, and is byte-stable for the same inputs.
type Manifest struct {
	Name            string          `json:"name"`
	SpecSHA256      string          `json:"specSHA256"`
	SourceDateEpoch int64           `json:"sourceDateEpoch"`
	Kernel          string          `json:"kernel"`
	Packages        []Package       `json:"packages"`
	Binaries        []FileDigest    `json:"binaries"`
	Images          []catalog.Image `json:"images,omitempty"`
	Contents        []PartSize      `json:"contents"`
	Artifacts       []FileDigest    `json:"artifacts"`
}

// PartSize is the uncompressed size of one part of the root filesystem,
// so a growth shows in the manifest's diff.
type PartSize struct {
	Part  string `json:"part"`
	Paths string `json:"paths"`
	Bytes int64  `json:"bytes"`
}

// rootfsParts are the parts the manifest sizes, in order; a path counts in
// the first part that names it, everything else in "the rest".
var rootfsParts = []struct{ part, paths string }{
	{"kernel modules", "/usr/lib/modules"},
	{"firmware", "/usr/lib/firmware"},
	{"container image archives", catalog.ArchiveDir},
	{"containerd seed (the other images, unpacked; squashfs)", imageseed.Image},
	{"kubelet, kubectl, containerd (built)", "/usr/bin/kubelet /usr/bin/kubectl /usr/bin/containerd /usr/bin/containerd-shim-runc-v2 /usr/bin/ctr"},
	{"kiln agent", "/usr/bin/kiln"},
	{"docker", "/usr/sbin/dockerd /usr/bin/docker /usr/bin/docker-proxy /usr/libexec/docker"},
	{"apt and dpkg state", "/var/lib/apt /var/cache/apt /var/lib/dpkg"},
	{"documentation and locales", "/usr/share/doc /usr/share/man /usr/share/locale /usr/share/i18n"},
}

// contentSizes sizes the root filesystem by rootfsParts.
func contentSizes(rootfs string) ([]PartSize, error) {
	out := make([]PartSize, 0, len(rootfsParts)+1)
	for _, p := range rootfsParts {
		var n int64
		for _, path := range strings.Fields(p.paths) {
			size, err := treeBytes(filepath.Join(rootfs, path))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("sizing %s: %w", path, err)
			}
			n += size
		}
		out = append(out, PartSize{Part: p.part, Paths: p.paths, Bytes: n})
	}
	total, err := treeBytes(rootfs)
	if err != nil {
		return nil, fmt.Errorf("sizing the root filesystem: %w", err)
	}
	rest := total
	for _, p := range out {
		rest -= p.Bytes
	}
	return append(out, PartSize{Part: "the rest", Paths: "/", Bytes: rest}), nil
}

// Package is one installed Debian package.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// FileDigest identifies one file by path, sha256 and size (the type
// kiln serve checks the artifacts with, from contract/netboot).
type FileDigest = netboot.FileDigest

// runtimeBinaries are the Debian-packaged binaries a node depends on;
// the manifest pins them by digest beside kiln's own.
var runtimeBinaries = []string{"/usr/bin/containerd", "/usr/bin/containerd-shim-runc-v2", "/usr/sbin/runc",
	"/usr/sbin/dockerd", "/usr/bin/docker", "/usr/sbin/iptables-legacy", "/usr/sbin/conntrack"}

func (b *build) writeManifest(ctx context.Context) error {
	pkgs, err := installedPackages(b.rootfs)
	if err != nil {
		return err
	}
	bins := append([]FileDigest(nil), b.binaries...)
	have := map[string]bool{}
	for _, d := range bins {
		have[d.Path] = true
	}
	cni, _ := filepath.Glob(filepath.Join(b.rootfs, "usr/lib/cni/*"))
	for _, p := range append(prefixed(b.rootfs, runtimeBinaries), cni...) {
		if have[strings.TrimPrefix(p, b.rootfs)] {
			continue // replaced by a component: already listed
		}
		d, err := netboot.DigestFile(p)
		if err != nil {
			return fmt.Errorf("manifest: %w", err)
		}
		d.Path = strings.TrimPrefix(p, b.rootfs)
		bins = append(bins, d)
	}
	sort.Slice(bins, func(i, j int) bool { return bins[i].Path < bins[j].Path })
	m := Manifest{Name: b.spec.Metadata.Name, SpecSHA256: b.spec.Hash, SourceDateEpoch: b.spec.SourceDateEpoch,
		Kernel: b.kver, Packages: pkgs, Binaries: bins, Images: sortedImages(b.images)}
	if m.Contents, err = contentSizes(b.rootfs); err != nil {
		return err
	}
	if m.Artifacts, err = artifactDigests(b.stage); err != nil {
		return err
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(b.stage, ManifestName), append(data, '\n'), 0o644)
}

// artifactDigests hashes every staged artifact, paths relative to the
// output directory, in walk order. The artifacts are hashed side by side,
// one per CPU: the ISO, the raw disk and the squashfs are a gigabyte
// together, a second of a rebuild hashed one after another.
func artifactDigests(stage string) ([]FileDigest, error) {
	var paths []string
	err := filepath.Walk(stage, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			paths = append(paths, p)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]FileDigest, len(paths))
	errs := make([]error, len(paths))
	slots := make(chan struct{}, runtime.NumCPU())
	var wg sync.WaitGroup
	for i, p := range paths {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			out[i], errs[i] = netboot.DigestFile(p)
			out[i].Path, _ = filepath.Rel(stage, p)
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// installedPackages reads dpkg's status file of the image.
func installedPackages(rootfs string) ([]Package, error) {
	data, err := os.ReadFile(filepath.Join(rootfs, "var/lib/dpkg/status"))
	if err != nil {
		return nil, fmt.Errorf("reading the image's package list: %w", err)
	}
	var out []Package
	var cur Package
	installed := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	flush := func() {
		if cur.Name != "" && installed {
			out = append(out, cur)
		}
		cur, installed = Package{}, false
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			flush()
		case strings.HasPrefix(line, "Package: "):
			cur.Name = strings.TrimPrefix(line, "Package: ")
		case strings.HasPrefix(line, "Version: "):
			cur.Version = strings.TrimPrefix(line, "Version: ")
		case strings.HasPrefix(line, "Status: "):
			installed = strings.HasSuffix(line, " installed")
		}
	}
	flush()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, sc.Err()
}

func digestBytes(path string, data []byte) FileDigest {
	s := sha256.Sum256(data)
	return FileDigest{Path: path, SHA256: hex.EncodeToString(s[:]), Size: int64(len(data))}
}

func prefixed(root string, paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Join(root, p)
	}
	return out
}

func sortedImages(in []catalog.Image) []catalog.Image {
	out := append([]catalog.Image(nil), in...)
	sort.Slice(out, func(i, j int) bool { return out[i].Role < out[j].Role })
	return out
}
