package etcdsnapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fakeSnapshot is what etcd streams: a bbolt file of pages pages (a
// meta page header first) and the SHA-256 of it.
func fakeSnapshot(pages int) []byte {
	const pageSize = 4096
	db := make([]byte, pages*pageSize)
	for i := range db {
		db[i] = byte(i * 7)
	}
	le := binary.LittleEndian
	le.PutUint64(db[0:], 0)
	le.PutUint16(db[8:], boltMetaFlag)
	le.PutUint32(db[16:], boltMagic)
	le.PutUint32(db[20:], boltVersion)
	le.PutUint32(db[24:], pageSize)
	sum := sha256.Sum256(db)
	return append(db, sum[:]...)
}

// fakeMember streams data, then fails with err when it is set.
type fakeMember struct {
	data   []byte
	err    error
	rev    int64
	dbSize int64
}

func (m fakeMember) SnapshotWithVersion(context.Context) (*clientv3.SnapshotResponse, error) {
	var r io.Reader = bytes.NewReader(m.data)
	if m.err != nil {
		r = io.MultiReader(r, errReader{m.err})
	}
	return &clientv3.SnapshotResponse{Header: &pb.ResponseHeader{Revision: m.rev}, Snapshot: io.NopCloser(r), Version: "3.6.5"}, nil
}

func (m fakeMember) Status(context.Context, string) (*clientv3.StatusResponse, error) {
	return &clientv3.StatusResponse{Header: &pb.ResponseHeader{Revision: m.rev}, DbSize: m.dbSize, Version: "3.6.5"}, nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func TestVerify(t *testing.T) {
	good := fakeSnapshot(3)
	flipped := slices.Clone(good)
	flipped[5000] ^= 0xff
	badHash := slices.Clone(good)
	badHash[len(badHash)-1] ^= 0x01
	notBolt := slices.Clone(good)
	copy(notBolt[16:], "nope")
	for _, tc := range []struct {
		name    string
		data    []byte
		wantErr string // "" for a snapshot that verifies
	}{
		{name: "whole snapshot", data: good},
		{name: "truncated by a page", data: good[:len(good)-4096], wantErr: "does not match"},
		{name: "truncated mid-page", data: good[:len(good)-100], wantErr: "not a whole number"},
		{name: "truncated to its header", data: good[:40], wantErr: "shorter than"},
		{name: "a byte of the database altered", data: flipped, wantErr: "does not match"},
		{name: "the hash altered", data: badHash, wantErr: "does not match"},
		{name: "not a bbolt file", data: notBolt, wantErr: "no bbolt database"},
		{name: "empty", data: nil, wantErr: "shorter than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "s.db")
			if err := os.WriteFile(p, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			v, err := Verify(p)
			if tc.wantErr == "" {
				whole := sha256.Sum256(tc.data)
				if err != nil || v.Size != int64(len(tc.data)) || v.SHA256 != fmt.Sprintf("%x", whole) {
					t.Fatalf("Verify = %+v, %v", v, err)
				}
				return
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), p) {
				t.Fatalf("Verify = %v, want ErrCorrupt naming %s with %q", err, p, tc.wantErr)
			}
		})
	}
}

func TestSaveWritesWholeVerifiedSnapshotsOnly(t *testing.T) {
	good := fakeSnapshot(2)
	reset := errors.New("connection reset")
	for _, tc := range []struct {
		name     string
		member   fakeMember
		existing bool
		wantErr  error
	}{
		{name: "whole stream", member: fakeMember{data: good, rev: 42}},
		{name: "the stream breaks half way", member: fakeMember{data: good[:5000], err: reset}, wantErr: reset},
		{name: "the stream ends early", member: fakeMember{data: good[:len(good)-10]}, wantErr: ErrCorrupt},
		{name: "the path exists", member: fakeMember{data: good}, existing: true, wantErr: ErrExists},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "backup.db")
			if tc.existing {
				os.WriteFile(out, []byte("the operator's"), 0o600)
			}
			snap, err := save(context.Background(), tc.member, out, 42)
			names := dirNames(t, dir)
			if tc.wantErr == nil {
				if err != nil || snap.Revision != 42 || snap.Size != int64(len(good)) || snap.Version != "3.6.5" {
					t.Fatalf("Save = %+v, %v", snap, err)
				}
				if !slices.Equal(names, []string{"backup.db"}) {
					t.Errorf("directory holds %v, want the snapshot alone", names)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Save = %v, want %v", err, tc.wantErr)
			}
			want := []string{}
			if tc.existing {
				want = []string{"backup.db"}
				if data, _ := os.ReadFile(out); string(data) != "the operator's" {
					t.Error("the existing file was changed")
				}
			}
			if !slices.Equal(names, want) {
				t.Errorf("after a failed save the directory holds %v, want %v (no temp file)", names, want)
			}
		})
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func TestNameSortsByTimeAndParsesBack(t *testing.T) {
	at := time.Date(2025, 3, 4, 5, 6, 7, 0, time.FixedZone("CET", 3600))
	name := Name(at, 1234)
	if name != "etcd-20250304T040607Z-rev1234.db" {
		t.Fatalf("Name = %s", name)
	}
	got, rev, ok := parseName(name)
	if !ok || !got.Equal(at) || rev != 1234 {
		t.Fatalf("parseName(%s) = %v %d %v", name, got, rev, ok)
	}
	for _, foreign := range []string{"etcd-backup.db", "etcd-20250304T040607Z-rev1234.db.bak", "etcd-20250304T040607Z.db", ".etcd-snapshot-123.part", "member"} {
		if _, _, ok := parseName(foreign); ok {
			t.Errorf("%s parsed as kiln's own", foreign)
		}
	}
}

// A scheduled directory lists and prunes kiln's snapshots alone, oldest
// first, and leaves every other file as it is.
func TestPruneKeepsTheNewestAndNothingElseGoes(t *testing.T) {
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		snaps int
		keep  int
		want  int
	}{
		{name: "fewer than keep", snaps: 2, keep: 24, want: 2},
		{name: "exactly keep", snaps: 3, keep: 3, want: 3},
		{name: "more than keep", snaps: 5, keep: 2, want: 2},
		{name: "keep one", snaps: 4, keep: 1, want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var names []string
			for i := range tc.snaps {
				// Written newest first: the order comes from the names.
				n := Name(base.Add(time.Duration(tc.snaps-i)*time.Hour), int64(100-i))
				names = append(names, n)
				os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600)
			}
			foreign := []string{"etcd-backup.db", "notes.txt", ".etcd-snapshot-1.part"}
			for _, f := range foreign {
				os.WriteFile(filepath.Join(dir, f), []byte("y"), 0o600)
			}
			d := Dir{Path: dir, Keep: tc.keep, Log: t.Logf}
			if err := d.prune(); err != nil {
				t.Fatal(err)
			}
			slices.Sort(names)
			want := append(slices.Clone(foreign), names[len(names)-tc.want:]...)
			slices.Sort(want)
			if got := dirNames(t, dir); !slices.Equal(got, want) {
				t.Errorf("after pruning: %v, want %v", got, want)
			}
		})
	}
}

func TestMakeRoom(t *testing.T) {
	const gib = 1 << 30
	snaps := func(sizes ...int64) []entry {
		var out []entry
		for i, s := range sizes {
			out = append(out, entry{name: fmt.Sprintf("s%d", i), size: s})
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		usage      Usage
		need       uint64
		have       []entry
		wantRemove int
		wantFits   bool
	}{
		{name: "plenty of room", usage: Usage{Avail: 50 * gib, Total: 100 * gib}, need: gib, have: snaps(gib, gib), wantFits: true},
		{name: "the reserve is a tenth of a large filesystem", usage: Usage{Avail: 10*gib + gib/2, Total: 100 * gib}, need: gib, have: snaps(), wantFits: false},
		{name: "the reserve is 1 GiB on a small filesystem", usage: Usage{Avail: gib + 100, Total: 4 * gib}, need: 100, have: snaps(), wantFits: true},
		{name: "the oldest go to make room", usage: Usage{Avail: 10 * gib, Total: 100 * gib}, need: 2 * gib, have: snaps(gib, gib, gib, gib), wantRemove: 2, wantFits: true},
		{name: "never the newest", usage: Usage{Avail: 10 * gib, Total: 100 * gib}, need: 5 * gib, have: snaps(gib, gib, gib), wantRemove: 2, wantFits: false},
		{name: "no snapshot to remove", usage: Usage{Avail: gib, Total: 100 * gib}, need: 100, have: snaps(), wantFits: false},
		{name: "the newest alone does not fit", usage: Usage{Avail: gib / 2, Total: 2 * gib}, need: gib, have: snaps(gib), wantFits: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			remove, fits := makeRoom(tc.usage, tc.need, tc.have)
			if len(remove) != tc.wantRemove || fits != tc.wantFits {
				t.Fatalf("makeRoom = remove %v, fits %v; want remove %d, fits %v", remove, fits, tc.wantRemove, tc.wantFits)
			}
			if !slices.Equal(remove, tc.have[:len(remove)]) {
				t.Errorf("removed %v, not the oldest", remove)
			}
		})
	}
}

func TestEstimate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dbSize int64
		have   []entry
		want   uint64
	}{
		{name: "the database size", dbSize: 1000, want: 1100},
		{name: "a newest snapshot larger than the database", dbSize: 1000, have: []entry{{"a", 5000}, {"b", 2000}}, want: 2200},
		{name: "no status size", dbSize: 0, have: []entry{{"a", 3000}}, want: 3300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := estimate(tc.dbSize, tc.have); got != tc.want {
				t.Errorf("estimate = %d, want %d", got, tc.want)
			}
		})
	}
}

type fakeDisk struct{ u Usage }

func (f fakeDisk) Usage(string) (Usage, error) { return f.u, nil }

// Take writes a verified snapshot named by time and revision, removes a
// stale temp file, prunes to Keep, and skips, saying why, when the
// filesystem cannot spare the room.
func TestTake(t *testing.T) {
	const gib = 1 << 30
	data := fakeSnapshot(2)
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		disk      Usage
		old       int
		wantNames []string
		wantErr   error
	}{
		{name: "room, pruned to keep", disk: Usage{Avail: 50 * gib, Total: 100 * gib}, old: 3,
			wantNames: []string{"etcd-20250601T100000Z-rev1.db", "etcd-20250601T110000Z-rev2.db", "etcd-20250601T120000Z-rev7.db"}},
		{name: "no room: skipped, the newest kept", disk: Usage{Avail: gib / 2, Total: 100 * gib}, old: 3,
			wantNames: []string{"etcd-20250601T110000Z-rev2.db"}, wantErr: ErrSkipped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for i := range tc.old {
				os.WriteFile(filepath.Join(dir, Name(now.Add(-time.Duration(tc.old-i)*time.Hour), int64(i))), fakeSnapshot(1), 0o600)
			}
			os.WriteFile(filepath.Join(dir, ".etcd-snapshot-99.part"), []byte("torn"), 0o600)
			var logs []string
			d := Dir{Path: dir, Keep: 3, Disk: fakeDisk{tc.disk}, Now: func() time.Time { return now },
				Log: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }}
			snap, err := d.Take(context.Background(), fakeMember{data: data, rev: 7, dbSize: int64(len(data))}, "https://127.0.0.1:2379")
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Take = %v, want %v", err, tc.wantErr)
			}
			if err == nil && snap.Path != filepath.Join(dir, "etcd-20250601T120000Z-rev7.db") {
				t.Errorf("snapshot at %s", snap.Path)
			}
			if err != nil && !strings.Contains(err.Error(), "etcd's data comes first") {
				t.Errorf("a skip says %q, not why", err)
			}
			if got := dirNames(t, dir); !slices.Equal(got, tc.wantNames) {
				t.Errorf("directory holds %v, want %v", got, tc.wantNames)
			}
			t.Logf("log: %q", logs)
		})
	}
}
