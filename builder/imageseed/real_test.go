package imageseed

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/builder/gobuild"
	"github.com/kiln-project/kiln/builder/ociimage"
	"github.com/kiln-project/kiln/images"
	"github.com/kiln-project/kiln/internal/mountinfo"
	"github.com/kiln-project/kiln/node/catalog"
)

// bindMount is mount(8) for the integration test: the seed directory
// bound read-only where a node mounts the squashfs, so containerd's
// overlay mounts take their lower layers through the planted links.
type bindMount struct{ seed string }

func (b bindMount) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	target := args[len(args)-1]
	if out, err := exec.CommandContext(ctx, "mount", "--bind", b.seed, target).CombinedOutput(); err != nil {
		return out, err
	}
	return exec.CommandContext(ctx, "mount", "-o", "remount,bind,ro", target).CombinedOutput()
}

// TestSeedOnARealContainerd makes a seed with the image's containerd
// (two images packed here), plants it into a fresh store, starts
// containerd on that store and mounts an image from it: the image is
// listed, pinned, and its files read back through the planted snapshot.
// Runs with KILN_INTEGRATION=1 (make integration) as root.
func TestSeedOnARealContainerd(t *testing.T) {
	if os.Getenv("KILN_INTEGRATION") != "1" {
		t.Skip("set KILN_INTEGRATION=1 (make integration) to run containerd on the host")
	}
	spec, err := images.Load("")
	if err != nil {
		t.Fatal(err)
	}
	bins, err := gobuild.Builder{CacheDir: gobuild.DefaultCacheDir()}.Build(context.Background(), gobuild.ContainerdTarget(spec.Components.Containerd.Version))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	var ims []catalog.Image
	for _, im := range []struct{ role, ref, path, body string }{
		{"etcd", "kiln.local/etcd:test", "/usr/local/bin/etcd", "etcd from the seed\n"},
		{"pause", "kiln.local/pause:test", "/catatonit", "pause from the seed\n"},
	} {
		src := filepath.Join(dir, im.role)
		os.WriteFile(src, []byte(im.body), 0o755)
		archive := filepath.Join(dir, im.role+".tar")
		res, err := ociimage.Write(ociimage.Spec{Ref: im.ref, Files: []ociimage.File{{Path: im.path, Source: src, Mode: 0o755}}, Created: time.Unix(1, 0)}, archive)
		if err != nil {
			t.Fatal(err)
		}
		ims = append(ims, catalog.Image{Role: im.role, Ref: im.ref, Digest: res.Digest, Archive: archive})
	}
	key := KeyFor(spec.Components.Containerd.Version, "test", ims)
	seed := filepath.Join(dir, "seed")
	if err := Make(ctx, MakeOptions{Containerd: bins["containerd"], Ctr: bins["ctr"], ContainerdVersion: spec.Components.Containerd.Version,
		Key: key, Images: ims, Dir: seed, Log: testWriter{t}}); err != nil {
		t.Fatal(err)
	}
	m, err := ReadManifest(filepath.Join(seed, ManifestName))
	if err != nil || m.Key != key || len(m.Images) != 2 || len(m.Snapshots) != 2 {
		t.Fatalf("seed manifest %+v (%v): want the key, 2 images, 2 snapshots", m, err)
	}
	if blobs, _ := os.ReadDir(filepath.Join(seed, TreeDir, contentDir, "blobs/sha256")); len(blobs) != 4 {
		t.Errorf("the seed carries %d blobs, want 4 (2 manifests, 2 configs: the layers are unpacked and discarded)", len(blobs))
	}

	// The node: plant, then containerd on the planted store.
	root := filepath.Join(dir, "node")
	os.MkdirAll(filepath.Join(root, filepath.Dir(Image)), 0o755)
	os.WriteFile(filepath.Join(root, Image), []byte("the squashfs; bound from the seed directory here"), 0o644)
	p := &Planter{Root: root, Sys: bindMount{seed: seed}, Log: t.Logf}
	t.Cleanup(func() { exec.Command("umount", "-l", filepath.Join(root, MountDir)).Run() })
	if res, err := p.Plant(ctx); err != nil || !res.Planted {
		t.Fatalf("plant: %+v %v", res, err)
	}
	d, err := startContainerd(bins["containerd"], bins["ctr"], filepath.Join(root, Store), filepath.Join(dir, "run"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop(); mountinfo.UnmountUnder(dir) })
	if err := d.waitReady(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := d.ctr(ctx, time.Minute, "images", "ls")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, im := range ims {
		line := lineWith(string(out), im.Ref)
		if line == "" || !strings.Contains(line, "io.cri-containerd.pinned=pinned") {
			t.Errorf("containerd on the planted store lists %s as %q, want it pinned:\n%s", im.Ref, line, out)
		}
	}
	target := filepath.Join(dir, "mnt")
	os.MkdirAll(target, 0o755)
	if out, err := d.ctr(ctx, time.Minute, "images", "mount", "--rw", "kiln.local/etcd:test", target); err != nil {
		t.Fatalf("mounting an image from the planted store: %v: %s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(target, "usr/local/bin/etcd"))
	if err != nil || string(got) != "etcd from the seed\n" {
		t.Errorf("the image's file through the planted snapshot: %q %v", got, err)
	}
	// A container writes to its own snapshot on the store, never the seed.
	if err := os.WriteFile(filepath.Join(target, "written"), []byte("x"), 0o644); err != nil {
		t.Errorf("writing in the mounted image: %v", err)
	}
	if _, err := os.Stat(filepath.Join(seed, TreeDir, snapshotsDir, m.Snapshots[0], "fs", "written")); err == nil {
		t.Error("a write in the mounted image landed in the seed")
	}
	if out, err := d.ctr(ctx, time.Minute, "images", "unmount", "--rm", target); err != nil {
		t.Errorf("unmount: %v: %s", err, out)
	}
}

func lineWith(out, ref string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, ref+" ") {
			return l
		}
	}
	return ""
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
