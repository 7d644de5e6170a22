package ignite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/kiln-project/kiln/firstboot/ignite/conformance"
	"github.com/kiln-project/kiln/internal/ignition"
)

// TestConformance applies every conformance case, under every spec
// version that has its fields, to a scratch root and checks the nodes it
// must leave. Users and units are checked for real on a booted image
// (qemu-tests: TestRawDiskSurvivesPowerCut).
func TestConformance(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("ownership needs root")
	}
	for _, c := range conformance.Cases() {
		for _, v := range conformance.Versions[slices.Index(conformance.Versions, c.Since):] {
			t.Run(c.Name+"/"+v, func(t *testing.T) {
				root := newRoot(t)
				applyCase(t, root, v, []conformance.Case{c}, 1)
			})
		}
	}
}

// TestConformanceCasesMerge applies all cases as the one config the QEMU
// suite boots with, twice, as the agent re-applies it on every boot.
func TestConformanceCasesMerge(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("ownership needs root")
	}
	root := newRoot(t)
	applyCase(t, root, "3.5.0", conformance.Cases(), 2)
}

func TestConformanceScriptIsShell(t *testing.T) {
	script := filepath.Join(t.TempDir(), "check.sh")
	if err := os.WriteFile(script, []byte(conformance.Script(conformance.Cases())), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("the rendered script does not parse: %v\n%s", err, out)
	}
}

// applyCase applies cases to root boots times; between boots everything
// but /var (the state partition) is rebuilt from the image, as on a node.
func applyCase(t *testing.T, root, version string, cases []conformance.Case, boots int) {
	t.Helper()
	raw, err := conformance.Config(version, cases)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err := ignition.Parse(raw)
	if err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	for boot := range boots {
		if boot > 0 {
			rebuild(t, root)
		}
		for _, c := range cases {
			for path, contents := range c.Existing {
				full := filepath.Join(root, path)
				if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(full, []byte(contents), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		plan, err := NewPlan(context.Background(), cfg, Sources{Fetcher: noFetch{}})
		if err != nil {
			t.Fatal(err)
		}
		a := &Applier{Root: root, Persistent: []string{"/var/lib/kiln"}, StampDir: "/var/lib/kiln/stamps", Host: &fakeHost{root: root}, Systemd: &fakeSystemd{}}
		if err := a.Check(plan); err != nil {
			t.Fatal(err)
		}
		if err := a.Apply(context.Background(), plan); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		for _, n := range c.Nodes {
			if err := checkNode(root, n); err != nil {
				t.Errorf("%s: %s: %v", c.Name, n.Path, err)
			}
		}
	}
}

// rebuild drops what a power cut loses: every path outside /var.
func rebuild(t *testing.T, root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "var" {
			if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	seedImage(root)
}

func checkNode(root string, n conformance.Node) error {
	full := filepath.Join(root, n.Path)
	fi, err := os.Lstat(full)
	if n.Kind == conformance.Missing {
		if err == nil {
			return fmt.Errorf("exists (mode %v), want nothing there", fi.Mode())
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if err != nil {
		return err
	}
	kind := conformance.File
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		kind = conformance.Symlink
	case fi.IsDir():
		kind = conformance.Dir
	}
	want := n.Kind
	if want == conformance.HardLink {
		want = conformance.File
	}
	if kind != want {
		return fmt.Errorf("is a %s, want a %s", kind, want)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if n.Mode != 0 && fi.Mode().Perm() != n.Mode.Perm() {
		return fmt.Errorf("mode %o, want %o", fi.Mode().Perm(), n.Mode.Perm())
	}
	if owner := fmt.Sprintf("%d:%d", st.Uid, st.Gid); n.Owner != "" && owner != n.Owner {
		return fmt.Errorf("owner %s, want %s", owner, n.Owner)
	}
	if n.Contents != nil {
		data, err := os.ReadFile(full)
		if err != nil {
			return err
		}
		if string(data) != *n.Contents {
			return fmt.Errorf("contents %q, want %q", data, *n.Contents)
		}
	}
	switch n.Kind {
	case conformance.Symlink:
		if target, _ := os.Readlink(full); target != n.Target {
			return fmt.Errorf("points at %q, want %q", target, n.Target)
		}
	case conformance.HardLink:
		other, err := os.Stat(filepath.Join(root, n.Target))
		if err != nil {
			return err
		}
		if !os.SameFile(fi, other) {
			return fmt.Errorf("is not a hard link of %s", n.Target)
		}
	}
	return nil
}
