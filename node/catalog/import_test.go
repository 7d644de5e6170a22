package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeCtr is containerd as ctr shows it: ls lists what it holds; import
// adds an archive's image, or fails for the archives in broken.
type fakeCtr struct {
	mu      sync.Mutex
	refs    map[string]string // archive path -> the ref it holds
	held    map[string]bool
	broken  map[string]bool
	lsErr   error
	lists   int // ls runs
	imports []string
}

func (f *fakeCtr) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if name != "ctr" || len(args) < 4 || args[0] != "-n" || args[1] != Namespace {
		return nil, fmt.Errorf("unexpected %s %v", name, args)
	}
	switch args[3] {
	case "ls":
		f.lists++
		var b strings.Builder
		b.WriteString("REF TYPE DIGEST SIZE PLATFORMS LABELS\n")
		for ref := range f.held {
			fmt.Fprintf(&b, "%s application/vnd.oci.image.manifest.v1+json sha256:x 1.0 MiB linux/amd64 -\n", ref)
		}
		return []byte(b.String()), f.lsErr
	case "import":
		archive := args[4]
		f.imports = append(f.imports, archive)
		if f.broken[archive] {
			return []byte("ctr: unexpected EOF"), errors.New("exit status 1")
		}
		f.held[f.refs[archive]] = true
		return nil, nil
	}
	return nil, fmt.Errorf("unexpected ctr %v", args)
}

func importFixture(t *testing.T) (root string, c *Catalog, ctr *fakeCtr) {
	root, c = t.TempDir(), full()
	ctr = &fakeCtr{refs: map[string]string{}, held: map[string]bool{}, broken: map[string]bool{}}
	for _, im := range c.Images {
		ctr.refs[filepath.Join(root, im.Archive)] = im.Ref
	}
	return root, c, ctr
}

func stampOf(root string, im Image) string {
	return filepath.Join(root, ImportedDir, strings.TrimPrefix(im.Digest, "sha256:"))
}

// The first boot imports every archive and stamps each digest; the next
// boot only lists containerd's images.
func TestImportOnceThenOnlyCheck(t *testing.T) {
	root, c, ctr := importFixture(t)
	var log bytes.Buffer
	if err := c.Import(context.Background(), root, ctr, &log, 0, 1, nil); err != nil {
		t.Fatal(err)
	}
	if len(ctr.imports) != len(c.Images) {
		t.Errorf("imported %d archives, want %d", len(ctr.imports), len(c.Images))
	}
	for _, im := range c.Images {
		if data, err := os.ReadFile(stampOf(root, im)); err != nil || string(data) != im.Ref+"\n" {
			t.Errorf("%s: stamp %q, %v", im.Role, data, err)
		}
		if !strings.Contains(log.String(), "imported "+im.Ref+" ("+im.Digest+")") {
			t.Errorf("the log does not mention %s:\n%s", im.Ref, log.String())
		}
	}
	ctr.imports = nil
	if err := c.Import(context.Background(), root, ctr, &log, 0, 1, nil); err != nil || len(ctr.imports) != 0 {
		t.Errorf("second boot imported %v (%v), want nothing", ctr.imports, err)
	}
}

// A stamp without the image in containerd (its store was wiped) and an
// image without a stamp (an import cut short) are both imported again.
func TestImportRedoesWhatIsNotBothStampedAndHeld(t *testing.T) {
	root, c, ctr := importFixture(t)
	if err := c.Import(context.Background(), root, ctr, &bytes.Buffer{}, 0, 1, nil); err != nil {
		t.Fatal(err)
	}
	wiped, unstamped := c.Images[0], c.Images[1]
	delete(ctr.held, wiped.Ref)
	os.Remove(stampOf(root, unstamped))
	ctr.imports = nil
	if err := c.Import(context.Background(), root, ctr, &bytes.Buffer{}, 0, 1, nil); err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(root, wiped.Archive), filepath.Join(root, unstamped.Archive)}
	if strings.Join(ctr.imports, " ") != strings.Join(want, " ") {
		t.Errorf("imported %v, want %v", ctr.imports, want)
	}
}

func TestImportFailures(t *testing.T) {
	t.Run("ls fails", func(t *testing.T) {
		root, c, ctr := importFixture(t)
		ctr.lsErr = errors.New("connection refused")
		err := c.Import(context.Background(), root, ctr, &bytes.Buffer{}, 0, 1, nil)
		if !errors.Is(err, ctr.lsErr) || !strings.Contains(err.Error(), "listing containerd's images") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("an archive fails", func(t *testing.T) {
		root, c, ctr := importFixture(t)
		bad := c.Images[2]
		ctr.broken[filepath.Join(root, bad.Archive)] = true
		err := c.Import(context.Background(), root, ctr, &bytes.Buffer{}, 0, 1, nil)
		if err == nil || !strings.Contains(err.Error(), "importing "+bad.Ref+" from "+bad.Archive) {
			t.Fatalf("err = %v, want it to name the image and its archive", err)
		}
		if _, err := os.Stat(stampOf(root, bad)); !os.IsNotExist(err) {
			t.Error("a failed import was stamped")
		}
	})
}

// A worker imports only the images it can run; a master all of them.
// Either imports the pause sandbox first and its static pods' images
// before the add-ons'.
func TestForRole(t *testing.T) {
	c := full()
	for _, tc := range []struct {
		role       string
		boot, rest []string
	}{
		{"genesis", []string{Pause, Etcd, APIServer, ControllerManager, Scheduler, CoreDNS}, []string{Kiln, Proxy}},
		{"master", []string{Pause, Etcd, APIServer, ControllerManager, Scheduler, CoreDNS}, []string{Kiln, Proxy}},
		{"worker", []string{Pause, CoreDNS}, []string{Kiln, Proxy}},
	} {
		cat, boot := c.ForRole(tc.role)
		var got []string
		for _, im := range cat.Images {
			got = append(got, im.Role)
		}
		if boot > len(got) || !slices.Equal(got[:boot], tc.boot) || !slices.Equal(slices.Sorted(slices.Values(got[boot:])), tc.rest) {
			t.Errorf("%s imports %v, the first %d before the kubelet; want %v then %v", tc.role, got, boot, tc.boot, tc.rest)
		}
	}
}

// The kubelet is let go once the images its static pods need are in, and
// not before; a node whose boot images were stamped on an earlier boot
// lets it go before it asks containerd anything, and still imports what
// containerd lost.
func TestImportReadyAfterBootImages(t *testing.T) {
	root, full, ctr := importFixture(t)
	c, boot := full.ForRole("master")
	readyAt, listsAtReady := -1, -1
	ready := func() {
		if readyAt != -1 {
			t.Error("ready called twice")
		}
		readyAt, listsAtReady = len(ctr.imports), ctr.lists
	}
	if err := c.Import(context.Background(), root, ctr, &bytes.Buffer{}, boot, 1, ready); err != nil {
		t.Fatal(err)
	}
	if readyAt != boot || len(ctr.imports) != len(c.Images) {
		t.Errorf("first boot: ready after %d of %d imports, want after %d", readyAt, len(ctr.imports), boot)
	}
	if listsAtReady != 1 {
		t.Errorf("first boot: ready after %d runs of ctr images ls, want 1", listsAtReady)
	}

	readyAt, ctr.imports, ctr.lists = -1, nil, 0
	if err := c.Import(context.Background(), root, ctr, &bytes.Buffer{}, boot, 1, ready); err != nil {
		t.Fatal(err)
	}
	if readyAt != 0 || listsAtReady != 0 || len(ctr.imports) != 0 {
		t.Errorf("second boot: ready after %d imports and %d ctr images ls, then %d imports; want ready first, nothing imported",
			readyAt, listsAtReady, len(ctr.imports))
	}

	lost := c.Images[0]
	delete(ctr.held, lost.Ref)
	readyAt, ctr.imports, ctr.lists = -1, nil, 0
	if err := c.Import(context.Background(), root, ctr, &bytes.Buffer{}, boot, 1, ready); err != nil {
		t.Fatal(err)
	}
	if readyAt != 0 || len(ctr.imports) != 1 || !ctr.held[lost.Ref] {
		t.Errorf("a stamped boot image containerd lost: ready after %d imports, imported %v; want ready first, then %s imported again",
			readyAt, ctr.imports, lost.Archive)
	}
}

// slowCtr imports each archive in a few milliseconds and records how many
// ran at once, and which began before the kubelet was let go.
type slowCtr struct {
	mu            sync.Mutex
	running, most int
	started       []string
	readyAt       int // len(started) when ready was called; -1 before
}

func (s *slowCtr) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	if args[3] == "ls" {
		return []byte("REF TYPE DIGEST\n"), nil
	}
	s.mu.Lock()
	s.running++
	s.most = max(s.most, s.running)
	s.started = append(s.started, args[4])
	s.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	s.mu.Lock()
	s.running--
	s.mu.Unlock()
	return nil, nil
}

// Imports run up to the given number at once, the boot images all
// before ready and the rest after it.
func TestImportRunsInParallelBootImagesFirst(t *testing.T) {
	for _, parallel := range []int{1, 2, 3} {
		t.Run(fmt.Sprint(parallel), func(t *testing.T) {
			root, full, _ := importFixture(t)
			c, boot := full.ForRole("master")
			ctr := &slowCtr{readyAt: -1}
			ready := func() {
				ctr.mu.Lock()
				defer ctr.mu.Unlock()
				ctr.readyAt = len(ctr.started)
				if ctr.running != 0 {
					t.Errorf("ready while %d imports still run", ctr.running)
				}
			}
			var log bytes.Buffer
			if err := c.Import(context.Background(), root, ctr, &log, boot, parallel, ready); err != nil {
				t.Fatal(err)
			}
			if ctr.most != min(parallel, boot) {
				t.Errorf("%d imports ran at once, want %d", ctr.most, min(parallel, boot))
			}
			if ctr.readyAt != boot || len(ctr.started) != len(c.Images) {
				t.Errorf("ready after %d of %d imports started, want after %d", ctr.readyAt, len(ctr.started), boot)
			}
			var bootArchives []string
			for _, im := range c.Images[:boot] {
				bootArchives = append(bootArchives, filepath.Join(root, im.Archive))
			}
			if !slices.Equal(slices.Sorted(slices.Values(ctr.started[:boot])), slices.Sorted(slices.Values(bootArchives))) {
				t.Errorf("started %v before ready, want the boot images %v", ctr.started[:boot], bootArchives)
			}
			if n := strings.Count(log.String(), "imported "); n != len(c.Images) {
				t.Errorf("%d import lines, want %d:\n%s", n, len(c.Images), log.String())
			}
		})
	}
}
