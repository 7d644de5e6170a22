package builder

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/internal/mountinfo"
)

// The cached base restored as an overlay on its extracted tree, for
// real (the build runs as root): the build sees the base and changes it,
// the extracted tree is never written, the work directory's cleanup
// leaves it whole, and the next build mounts it again without
// extracting it a second time.
func TestCachedBaseIsAnOverlayThatLeavesTheTreeAlone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting an overlay needs root (make image runs as root)")
	}
	cache := t.TempDir()
	base := t.TempDir()
	for p, data := range map[string]string{"etc/os-release": "ID=debian\n", "usr/bin/tool": "#!/bin/sh\n", "etc/machine-id": "old\n"} {
		os.MkdirAll(filepath.Join(base, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(base, p), []byte(data), 0o644)
	}
	os.Link(filepath.Join(base, "usr/bin/tool"), filepath.Join(base, "usr/bin/tool2"))
	cachedTar := filepath.Join(cache, "rootfs", "k1.tar")
	os.MkdirAll(filepath.Dir(cachedTar), 0o755)
	if out, err := exec.Command("tar", "--numeric-owner", "-C", base, "-cf", cachedTar, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}

	restore := func() (*build, string) {
		t.Helper()
		work := t.TempDir()
		var progress bytes.Buffer
		b := &build{opts: Options{Progress: &progress}, run: ExecRunner{}, work: work, rootfs: filepath.Join(work, "rootfs")}
		if err := b.restoreBase(context.Background(), cachedTar); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mountinfo.UnmountUnder(work) })
		return b, progress.String()
	}
	b, progress := restore()
	if !strings.Contains(progress, "extracting the cached base once") || !strings.Contains(progress, "overlay on the extracted base") {
		t.Fatalf("progress: %q", progress)
	}
	if got, _ := os.ReadFile(filepath.Join(b.rootfs, "etc/os-release")); string(got) != "ID=debian\n" {
		t.Fatalf("the build sees %q in its root filesystem", got)
	}
	a, _ := os.Stat(filepath.Join(b.rootfs, "usr/bin/tool"))
	c, _ := os.Stat(filepath.Join(b.rootfs, "usr/bin/tool2"))
	if !os.SameFile(a, c) {
		t.Error("a hard link of the base is two files in the overlay: mksquashfs would store it twice")
	}
	// What the build's steps do: write, replace, remove.
	if err := writeFiles(b.rootfs, []file{{path: "/etc/machine-id", mode: 0o444}, {path: "/etc/kiln/new", data: "x", mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(b.rootfs, "usr/bin/tool")); err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(cache, "rootfs", "k1.tree")
	check := func(when string) {
		t.Helper()
		for p, want := range map[string]string{"etc/machine-id": "old\n", "usr/bin/tool": "#!/bin/sh\n"} {
			if got, err := os.ReadFile(filepath.Join(tree, p)); err != nil || string(got) != want {
				t.Errorf("%s: the extracted base's %s is %q (%v), want %q", when, p, got, err, want)
			}
		}
		if _, err := os.Stat(filepath.Join(tree, "etc/kiln/new")); err == nil {
			t.Errorf("%s: the build's new file is in the extracted base", when)
		}
	}
	check("during the build")
	if err := mountinfo.UnmountUnder(b.work); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(b.work); err != nil {
		t.Fatal(err)
	}
	check("after the work directory's cleanup")

	b2, progress := restore()
	if strings.Contains(progress, "extracting") {
		t.Errorf("the second build extracted the base again: %q", progress)
	}
	if got, _ := os.ReadFile(filepath.Join(b2.rootfs, "etc/machine-id")); string(got) != "old\n" {
		t.Errorf("the second build sees the first build's change: %q", got)
	}
}

// NoBaseOverlay untars as builds did before the overlay.
func TestNoBaseOverlayUntars(t *testing.T) {
	rec := &recordingRunner{}
	work := t.TempDir()
	b := &build{opts: Options{NoBaseOverlay: true, Progress: &bytes.Buffer{}}, run: rec, work: work, rootfs: filepath.Join(work, "rootfs")}
	if err := b.restoreBase(context.Background(), "/cache/rootfs/k1.tar"); err != nil {
		t.Fatal(err)
	}
	if len(rec.cmds) != 1 || !strings.Contains(strings.Join(rec.cmds[0].Args, " "), "-C "+b.rootfs+" -xpf /cache/rootfs/k1.tar") {
		t.Errorf("commands: %+v", rec.cmds)
	}
}

// recordingRunner records the commands and runs none.
type recordingRunner struct{ cmds []Cmd }

func (r *recordingRunner) Run(_ context.Context, c Cmd) error {
	r.cmds = append(r.cmds, c)
	return nil
}
