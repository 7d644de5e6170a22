package stage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/contract/netboot"
	"github.com/kiln-project/kiln/contract/upgradeask"
	"github.com/kiln-project/kiln/firstboot/bootrecord"
)

var (
	kernel = []byte("the new kernel")
	initrd = []byte("the new initrd")
	rootfs = random(300_000, 1)
	other  = random(300_000, 2) // not what the ask names

	kilnSHA = "0522ca4d8ea4" + strings.Repeat("7", 52)
	v1      = bootslot.Image{Version: "v1.36.0+kiln.111111111111", Digest: "sha256-" + strings.Repeat("1", 64)}
	older   = bootslot.Image{Version: "v1.37.0+kiln.222222222222", Digest: "sha256-" + strings.Repeat("2", 64)}
	newImg  = bootslot.Image{Version: "v1.37.1+kiln.0522ca4d8ea4", Digest: "sha256-" + sum256(rootfs)}

	activeA = bootslot.Record{Active: bootslot.A, SlotA: v1}
)

const (
	partSize = 512 << 10
	fill     = 0xee // what the partitions hold before a stage
)

func random(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func sum256(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// serveBytes serves b with its length.
func serveBytes(b []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	}
}

// specArgs are the build's extra kernel arguments the asks carry.
var specArgs = []string{"quiet", "console=ttyS1,115200"}

// node is a node's disk (slot partitions under dev/), its ESP holding a
// record, its state partition and a server of the ask's artifacts.
type node struct {
	root   string
	esp    bootrecord.Store
	served atomic.Int32
	ask    upgradeask.Ask
}

func newNode(t *testing.T, rec bootslot.Record, size int64, handlers map[string]http.HandlerFunc) *node {
	t.Helper()
	n := &node{root: t.TempDir(), esp: bootrecord.Store{Dir: t.TempDir()}}
	b, err := bootslot.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	env := filepath.Join(n.esp.Dir, filepath.FromSlash(bootslot.EnvPath))
	if err := os.MkdirAll(filepath.Dir(env), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(env, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, s := range bootslot.Slots {
		p := n.partPath(s)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, bytes.Repeat([]byte{fill}, int(size)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]http.HandlerFunc{
		netboot.Kernel: serveBytes(kernel), netboot.Initrd: serveBytes(initrd), netboot.Rootfs: serveBytes(rootfs),
	}
	for name, h := range handlers {
		files[name] = h
	}
	mux := http.NewServeMux()
	for name, h := range files {
		mux.HandleFunc("/images/node/"+name, func(w http.ResponseWriter, r *http.Request) {
			n.served.Add(1)
			h(w, r)
		})
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	n.ask = upgradeask.Ask{
		Request: "3f2a9c0d11e4b7a8", KilnSHA256: kilnSHA, Kubernetes: "v1.37.1", URL: srv.URL + "/images/node",
		Artifacts: upgradeask.Artifacts{Kernel: sum256(kernel), Initrd: sum256(initrd), Rootfs: sum256(rootfs)},
		Args:      specArgs,
	}
	return n
}

func (n *node) partPath(s bootslot.Slot) string {
	return filepath.Join(n.root, "dev/disk/by-partlabel", s.PartLabel())
}

// corrupt flips a byte of what is read back from a partition.
type corrupt struct{ Partition }

func (c corrupt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.Partition.ReadAt(p, off)
	if off == 0 && n > 0 {
		p[0] ^= 0xff
	}
	return n, err
}

type corruptDisk struct{ Partitions }

func (d corruptDisk) OpenPartition(label string) (Partition, error) {
	p, err := d.Partitions.OpenPartition(label)
	return corrupt{p}, err
}

// What a case expects of slot b's partition afterwards.
const (
	partAny       = iota // partly written: only its size is checked
	partUntouched        // as before the stage
	partWritten          // the root, then what was there before
)

func TestStage(t *testing.T) {
	staged := func(img bootslot.Image) bootslot.Record {
		return bootslot.Record{Active: bootslot.A, Staged: bootslot.B, Phase: bootslot.PhaseStaged,
			Tries: bootslot.StageTries, SlotA: v1, SlotB: img}
	}
	trying := staged(older)
	trying.Tries = 0
	chunked := func(w http.ResponseWriter, _ *http.Request) { w.Write(rootfs) } // no Content-Length

	for _, tc := range []struct {
		name    string
		rec     bootslot.Record
		booted  bootslot.Slot
		size    int64                       // slot partitions' size; 0 is partSize
		serve   map[string]http.HandlerFunc // artifacts served otherwise
		ask     func(*upgradeask.Ask)
		corrupt bool          // the partition reads back wrong
		timeout time.Duration // Stager.FetchTimeout
		wantErr []string      // in the error; {url} is the ask's URL
		state   string        // the record's, afterwards
		fetches int32
		part    int  // slot b's partition: partAny, partUntouched, partWritten
		boot    bool // the ESP holds the new kernel and initrd at slot b's paths
		already bool
		kept    bool // the record is left as it was
	}{
		{name: "a good stage", rec: activeA, booted: bootslot.A,
			state: "active a, staged b (tries 1)", fetches: 3, part: partWritten, boot: true},
		{name: "replacing an unfinished stage",
			rec:    bootslot.Record{Active: bootslot.A, Staged: bootslot.B, Phase: bootslot.PhaseWriting, SlotA: v1, SlotB: older},
			booted: bootslot.A, state: "active a, staged b (tries 1)", fetches: 3, part: partWritten, boot: true},
		{name: "replacing an untried stage of another image", rec: staged(older), booted: bootslot.A,
			state: "active a, staged b (tries 1)", fetches: 3, part: partWritten, boot: true},
		{name: "the image already staged: nothing fetched", rec: staged(newImg), booted: bootslot.A,
			state: "active a, staged b (tries 1)", fetches: 0, part: partUntouched, already: true, kept: true},
		{name: "a trying boot is judged first", rec: trying, booted: bootslot.B,
			wantErr: []string{"this boot runs slot b, but the record's active slot is a", "marked good or rolled back"},
			state:   "active a, staged b (tries 0)", part: partUntouched, kept: true},
		{name: "a stage whose try has begun is refused", rec: trying, booted: bootslot.A,
			wantErr: []string{"boot-state transition refused", "has begun its trying boot"},
			state:   "active a, staged b (tries 0)", part: partUntouched, kept: true},
		{name: "a malformed ask", rec: activeA, booted: bootslot.A, ask: func(a *upgradeask.Ask) { a.KilnSHA256 = "0522ca4d" },
			wantErr: []string{`kilnSHA256 "0522ca4d"`}, state: "active a", part: partUntouched, kept: true},
		{name: "a kernel argument GRUB would split", rec: activeA, booted: bootslot.A, ask: func(a *upgradeask.Ask) { a.Args = []string{"a b"} },
			wantErr: []string{`args: argument 0: "a b" holds whitespace`}, state: "active a", part: partUntouched, kept: true},
		{name: "the root's digest differs", rec: activeA, booted: bootslot.A,
			serve:   map[string]http.HandlerFunc{netboot.Rootfs: serveBytes(other)},
			wantErr: []string{"rootfs.squashfs from {url}/rootfs.squashfs has sha256 " + sum256(other), "the ask's is " + sum256(rootfs)},
			state:   "active a, writing b", fetches: 1, part: partAny},
		{name: "the kernel's digest differs", rec: activeA, booted: bootslot.A,
			serve:   map[string]http.HandlerFunc{netboot.Kernel: serveBytes([]byte("another kernel"))},
			wantErr: []string{"vmlinuz from {url}/vmlinuz has sha256 " + sum256([]byte("another kernel")), "the ask's is " + sum256(kernel)},
			state:   "active a, writing b", fetches: 2, part: partWritten},
		{name: "a root larger than the partition", rec: activeA, booted: bootslot.A, size: 256 << 10,
			wantErr: []string{"rootfs.squashfs from {url}/rootfs.squashfs is 300000 bytes, larger than partition KILN-ROOT-B (262144 bytes): nothing written"},
			state:   "active a, writing b", fetches: 1, part: partUntouched},
		{name: "a root of unknown size that passes the partition's end", rec: activeA, booted: bootslot.A, size: 256 << 10,
			serve:   map[string]http.HandlerFunc{netboot.Rootfs: chunked},
			wantErr: []string{"writing rootfs.squashfs from {url}/rootfs.squashfs into partition KILN-ROOT-B: it is larger than the partition (262144 bytes)"},
			state:   "active a, writing b", fetches: 1, part: partAny},
		{name: "an HTTP 404", rec: activeA, booted: bootslot.A,
			serve:   map[string]http.HandlerFunc{netboot.Rootfs: http.NotFound},
			wantErr: []string{"fetching rootfs.squashfs: GET {url}/rootfs.squashfs: 404 Not Found"},
			state:   "active a, writing b", fetches: 1, part: partUntouched},
		{name: "a server that stops answering", rec: activeA, booted: bootslot.A, timeout: 200 * time.Millisecond,
			serve:   map[string]http.HandlerFunc{netboot.Kernel: func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
			wantErr: []string{"fetching vmlinuz: ", "gave up waiting for vmlinuz from {url}/vmlinuz after 200ms"},
			state:   "active a, writing b", fetches: 2, part: partWritten},
		{name: "a root that reads back wrong", rec: activeA, booted: bootslot.A, corrupt: true,
			wantErr: []string{"rootfs.squashfs reads back from partition KILN-ROOT-B with sha256 ", "it was written with " + sum256(rootfs)},
			state:   "active a, writing b", fetches: 1, part: partWritten},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size := tc.size
			if size == 0 {
				size = partSize
			}
			n := newNode(t, tc.rec, size, tc.serve)
			if tc.ask != nil {
				tc.ask(&n.ask)
			}
			var logs []string
			s := New(n.root, n.esp, func(f string, args ...any) { logs = append(logs, f) })
			s.FetchTimeout = tc.timeout
			if tc.corrupt {
				s.Disk = corruptDisk{s.Disk}
			}
			res, err := s.Stage(context.Background(), n.ask, tc.booted)
			t.Logf("Stage: %+v, %v", res, err)

			switch {
			case len(tc.wantErr) == 0 && err != nil:
				t.Fatalf("Stage: %v", err)
			case len(tc.wantErr) > 0 && err == nil:
				t.Fatalf("Stage succeeded; want an error with %q", tc.wantErr)
			}
			for _, want := range tc.wantErr {
				if want = strings.ReplaceAll(want, "{url}", n.ask.URL); !strings.Contains(err.Error(), want) {
					t.Errorf("error %q\nlacks %q", err, want)
				}
			}
			if r, rerr := n.esp.Read(); rerr != nil {
				t.Error(rerr)
			} else if r.State() != tc.state {
				t.Errorf("record %q, want %q", r.State(), tc.state)
			} else if tc.kept && r != tc.rec {
				t.Errorf("record changed to %+v", r)
			} else if !tc.kept && (r.SlotA != v1 || r.SlotB != newImg) {
				t.Errorf("slots a %+v, b %+v; want a %+v, b %+v", r.SlotA, r.SlotB, v1, newImg)
			}
			if got := n.served.Load(); got != tc.fetches {
				t.Errorf("%d artifacts fetched, want %d", got, tc.fetches)
			}
			checkPart(t, n.partPath(bootslot.B), size, tc.part)
			checkPart(t, n.partPath(bootslot.A), size, partUntouched)
			args, _ := bootslot.EncodeArgs(specArgs)
			for path, want := range map[string][]byte{bootslot.B.Kernel(): kernel, bootslot.B.Initrd(): initrd, bootslot.B.Args(): args} {
				got, _ := os.ReadFile(filepath.Join(n.esp.Dir, path))
				if tc.boot != bytes.Equal(got, want) {
					t.Errorf("ESP %s holds %q; want the new one: %v", path, got, tc.boot)
				}
			}
			if err != nil {
				return
			}
			wantRes := Result{Slot: bootslot.B, Image: newImg, AlreadyStaged: tc.already}
			if !tc.already {
				wantRes.Bytes = int64(len(rootfs))
				wantRes.Write, wantRes.ReadBack = res.Write, res.ReadBack
				if res.Write <= 0 || res.ReadBack <= 0 {
					t.Errorf("durations: write %s, read back %s", res.Write, res.ReadBack)
				}
				if len(logs) != 5 { // the start, one per artifact, the end
					t.Errorf("%d log lines, want 5: %q", len(logs), logs)
				}
			}
			if res != wantRes {
				t.Errorf("result %+v, want %+v", res, wantRes)
			}
		})
	}
}

// checkPart checks the partition at path kept its size and, per want,
// its contents.
func checkPart(t *testing.T, path string, size int64, want int) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(got)) != size {
		t.Fatalf("%s is %d bytes, was %d", path, len(got), size)
	}
	before := bytes.Repeat([]byte{fill}, int(size))
	switch want {
	case partUntouched:
		if !bytes.Equal(got, before) {
			t.Errorf("%s was written", filepath.Base(path))
		}
	case partWritten:
		if !bytes.Equal(got[:len(rootfs)], rootfs) || !bytes.Equal(got[len(rootfs):], before[len(rootfs):]) {
			t.Errorf("%s does not hold the root followed by what was there", filepath.Base(path))
		}
	}
}

func TestImageForFitsTheRecord(t *testing.T) {
	ask := upgradeask.Ask{KilnSHA256: kilnSHA, Kubernetes: "v1.37.1", Artifacts: upgradeask.Artifacts{Rootfs: sum256(rootfs)}}
	img := ImageFor(ask)
	if img != newImg {
		t.Errorf("ImageFor = %+v, want %+v", img, newImg)
	}
	if _, err := bootslot.Stage(activeA, bootslot.B, img); err != nil {
		t.Errorf("the record refuses the image: %v", err)
	}
}

func TestReleaseOf(t *testing.T) {
	for _, tc := range []struct {
		version, release string
		ok               bool
	}{
		{ImageFor(upgradeask.Ask{Kubernetes: "v1.37.1", KilnSHA256: kilnSHA}).Version, "v1.37.1", true},
		{"v1.0.0", "", false},
		{"+kiln.0522ca4d8ea4", "", false},
	} {
		if r, ok := ReleaseOf(tc.version); r != tc.release && tc.ok || ok != tc.ok {
			t.Errorf("ReleaseOf(%q) = %q, %v; want %q, %v", tc.version, r, ok, tc.release, tc.ok)
		}
	}
}
