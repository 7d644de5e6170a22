package builder

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/builder/imageseed"
	"github.com/kiln-project/kiln/builder/ociimage"
	"github.com/kiln-project/kiln/contract/rtexec"
	"github.com/kiln-project/kiln/images"
	"github.com/kiln-project/kiln/node/catalog"
)

// releaseFixture is what an operator points a spec at instead of the
// module proxy: release binaries and a prebuilt image archive, served
// here as file:// URLs and pinned by sha256.
type releaseFixture struct {
	dir  string
	spec *images.Spec
}

func newReleaseFixture(t *testing.T) releaseFixture {
	t.Helper()
	dir := t.TempDir()
	sum := func(p string) string {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s := sha256.Sum256(data)
		return hex.EncodeToString(s[:])
	}
	c := &images.Components{
		Kubernetes: images.Component{Version: "v1.37.1"}, Etcd: images.Component{Version: "v3.6.5"},
		CoreDNS: images.Component{Version: "v1.15.0"}, Containerd: images.Component{Version: "v2.2.9"},
	}
	comps := map[string]*images.Component{"kubernetes": &c.Kubernetes, "etcd": &c.Etcd, "coredns": &c.CoreDNS, "containerd": &c.Containerd}
	for comp, progs := range images.Programs {
		for _, prog := range progs {
			if prog == "kube-proxy" {
				continue // comes as a prebuilt image archive below
			}
			p := filepath.Join(dir, prog)
			os.WriteFile(p, []byte("#!/bin/sh\necho "+prog+"\n"), 0o755)
			comps[comp].Binaries = append(comps[comp].Binaries, images.Binary{Name: prog, Source: "file://" + p, SHA256: sum(p)})
		}
	}
	bin := filepath.Join(dir, "kube-proxy.bin")
	os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755)
	archive := filepath.Join(dir, "kube-proxy.tar")
	if _, err := ociimage.Write(ociimage.Spec{Ref: "registry.k8s.io/kube-proxy:v1.37.1",
		Files: []ociimage.File{{Path: "/usr/local/bin/kube-proxy", Source: bin, Mode: 0o755}}, Created: time.Unix(1, 0)}, archive); err != nil {
		t.Fatal(err)
	}
	c.Images = []images.ImageArchive{{Source: "file://" + archive, SHA256: sum(archive)}}
	kiln := filepath.Join(dir, "kiln")
	os.WriteFile(kiln, []byte("kiln binary"), 0o755)
	return releaseFixture{dir: dir, spec: &images.Spec{Components: c, SourceDateEpoch: 1735689600, Dir: dir, Squashfs: images.Squashfs{Compression: "zstd", Level: 3}}}
}

func (f releaseFixture) build(t *testing.T) *build {
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	os.MkdirAll(rootfs, 0o755)
	fakeNetRootfs(t, rootfs) // the kiln image carries kiln-net's ip and iptables
	fakeCatatonit(t, rootfs) // the pause image
	return &build{opts: Options{KilnBinary: filepath.Join(f.dir, "kiln"), CacheDir: t.TempDir(), Progress: io.Discard}, spec: f.spec,
		rootfs: rootfs, work: t.TempDir(), run: ExecRunner{Env: os.Environ()}, seedMaker: fakeSeed}
}

// fakeSeed stands in for imageseed.Make (which runs containerd; the
// integration test runs the real one): it checks every archive is there
// and writes a manifest naming the images.
func fakeSeed(_ context.Context, o imageseed.MakeOptions) error {
	m := imageseed.Manifest{Key: o.Key, Containerd: o.ContainerdVersion}
	for _, im := range o.Images {
		if _, err := os.Stat(im.Archive); err != nil {
			return err
		}
		m.Images = append(m.Images, im)
	}
	data, _ := json.Marshal(m)
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(o.Dir, imageseed.ManifestName), data, 0o644)
}

// Release binaries and a prebuilt archive from file:// URLs are baked,
// nothing is built, and the catalog lists every image with its digest.
func TestComponentsFromReleaseURLs(t *testing.T) {
	f := newReleaseFixture(t)
	b := f.build(t)
	if err := b.installComponents(context.Background()); err != nil {
		t.Fatal(err)
	}
	for prog, dst := range hostPrograms {
		data, err := os.ReadFile(filepath.Join(b.rootfs, dst))
		if err != nil || !strings.Contains(string(data), "echo "+prog) {
			t.Errorf("%s: %q %v", dst, data, err)
		}
	}
	// kiln's own rt-exec is compiled whatever the spec takes from URLs.
	if data, err := os.ReadFile(filepath.Join(b.rootfs, rtexec.Path)); err != nil || !bytes.HasPrefix(data, []byte("\x7fELF")) {
		t.Errorf("%s: not an executable (%v)", rtexec.Path, err)
	}
	cat, err := catalog.Read(filepath.Join(b.rootfs, catalog.Path))
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range cat.Images {
		if !strings.HasPrefix(im.Digest, "sha256:") {
			t.Errorf("%s: digest %q", im.Role, im.Digest)
		}
		// Every image is in the seed, kiln's own too: none is left to
		// import at boot.
		if im.Archive != "" {
			t.Errorf("%s: archive %s, want none (seeded)", im.Role, im.Archive)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(b.rootfs, catalog.ArchiveDir)); len(ents) != 0 {
		t.Errorf("%d archives left in the image, want none", len(ents))
	}
	if st, err := os.Stat(filepath.Join(b.rootfs, imageseed.Image)); err != nil || st.Size() == 0 {
		t.Errorf("the seed squashfs: %v", err)
	}
	if cat.KubernetesVersion != "v1.37.1" {
		t.Errorf("the catalog records Kubernetes %q, want the spec's v1.37.1", cat.KubernetesVersion)
	}
	if ref, _ := cat.Ref(catalog.Proxy); ref != "registry.k8s.io/kube-proxy:v1.37.1" {
		t.Errorf("kube-proxy is %s, want the prebuilt archive's image", ref)
	}
	if ref, _ := cat.Ref(catalog.APIServer); ref != "kiln.local/kube-apiserver:v1.37.1" {
		t.Errorf("kube-apiserver is %s, want one packed from the release binary", ref)
	}
	toml, _ := os.ReadFile(filepath.Join(b.rootfs, "/etc/containerd/config.toml"))
	if pause, _ := cat.Ref(catalog.Pause); !strings.Contains(string(toml), `sandbox = "`+pause+`"`) {
		t.Errorf("containerd's sandbox image is not the baked pause %s", pause)
	}
	m, _ := json.Marshal(sortedImages(b.images))
	if !strings.Contains(string(m), `"role":"etcd"`) {
		t.Errorf("the manifest's images: %s", m)
	}
}

func TestComponentErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		break_     func(c *images.Components)
	}{
		{"sha256 mismatch", "components.etcd.binaries[0] (etcd): sha256 mismatch", func(c *images.Components) {
			c.Etcd.Binaries[0].SHA256 = strings.Repeat("0", 64)
		}},
		{"a program missing", "components.containerd: no binary and no image archive for ctr", func(c *images.Components) {
			c.Containerd.Binaries = c.Containerd.Binaries[:2]
		}},
		{"archive sha256", "components.images[0]: sha256 mismatch", func(c *images.Components) {
			c.Images[0].SHA256 = strings.Repeat("1", 64)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newReleaseFixture(t)
			tc.break_(f.spec.Components)
			err := f.build(t).installComponents(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// A manifest that names an image nobody baked fails the build.
func TestUnbakedImageFailsTheBuild(t *testing.T) {
	cat := &catalog.Catalog{}
	for _, r := range catalog.Roles {
		cat.Images = append(cat.Images, catalog.Image{Role: r, Ref: "kiln.local/" + r + ":1"})
	}
	if err := checkReferences(cat); err != nil {
		t.Fatalf("complete catalog: %v", err)
	}
	cat.Images[0].Role = "something-else" // etcd's image is no longer known by its role
	if err := checkReferences(cat); err == nil || !strings.Contains(err.Error(), "not baked") {
		t.Fatalf("got %v, want a not-baked error", err)
	}
}

func TestResolveInStaysInsideTheRoot(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "usr/lib/x86_64-linux-gnu"), 0o755)
	os.WriteFile(filepath.Join(root, "usr/lib/x86_64-linux-gnu/libx.so.1.2"), []byte("x"), 0o644)
	os.Symlink("usr/lib", filepath.Join(root, "lib"))
	os.Symlink("libx.so.1.2", filepath.Join(root, "usr/lib/x86_64-linux-gnu/libx.so.1"))
	os.Symlink("/etc/passwd", filepath.Join(root, "usr/lib/escape"))
	got, err := resolveIn(root, "/lib/x86_64-linux-gnu/libx.so.1")
	if err != nil || got != filepath.Join(root, "usr/lib/x86_64-linux-gnu/libx.so.1.2") {
		t.Errorf("resolveIn: %s %v", got, err)
	}
	if got, err := resolveIn(root, "/usr/lib/escape"); err == nil {
		t.Errorf("an absolute link resolved outside the root's own /etc: %s", got)
	}
}
