package etcdsnapshot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"
)

// Dir is a master's directory of scheduled snapshots. kiln treats as
// its own only the files named as it names them (Name), and removes
// nothing else there.
type Dir struct {
	Path string
	// Keep is how many of the newest snapshots stay after a new one.
	Keep int
	// Disk reads the filesystem's space (StatFS outside tests).
	Disk Disk
	Now  func() time.Time
	Log  Logf
}

// Disk is what the space rule reads of a filesystem.
type Disk interface {
	Usage(dir string) (Usage, error)
}

// Usage is a filesystem's size and the bytes free for writing.
type Usage struct{ Avail, Total uint64 }

// StatFS reads Usage with statfs(2).
type StatFS struct{}

// Usage is the filesystem of dir's.
func (StatFS) Usage(dir string) (Usage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return Usage{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return Usage{Avail: st.Bavail * uint64(st.Bsize), Total: st.Blocks * uint64(st.Bsize)}, nil
}

// ErrSkipped is Take's answer when the filesystem cannot spare the room
// for a snapshot: etcd's data, on the same filesystem, comes first.
var ErrSkipped = errors.New("snapshot skipped")

// Name is a scheduled snapshot's file name: the UTC time it was taken
// and the store's revision (Snapshot.Revision), sortable by time as
// text.
func Name(t time.Time, revision int64) string {
	return fmt.Sprintf("etcd-%s-rev%d.db", t.UTC().Format(nameTime), revision)
}

const nameTime = "20060102T150405Z"

var namePattern = regexp.MustCompile(`^etcd-(\d{8}T\d{6}Z)-rev(\d+)\.db$`)

// parseName is the time and revision in a name Name gives; ok is false
// for any other name.
func parseName(name string) (t time.Time, revision int64, ok bool) {
	m := namePattern.FindStringSubmatch(name)
	if m == nil {
		return time.Time{}, 0, false
	}
	t, err := time.Parse(nameTime, m[1])
	if err != nil {
		return time.Time{}, 0, false
	}
	revision, err = strconv.ParseInt(m[2], 10, 64)
	return t, revision, err == nil
}

// entry is one of kiln's snapshots in the directory.
type entry struct {
	name string
	size int64
}

// list is kiln's snapshots in the directory, oldest first.
func (d Dir) list() ([]entry, error) {
	des, err := os.ReadDir(d.Path)
	if err != nil {
		return nil, err
	}
	var out []entry
	for _, de := range des {
		if _, _, ok := parseName(de.Name()); !ok || !de.Type().IsRegular() {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			continue // gone since the listing
		}
		out = append(out, entry{de.Name(), fi.Size()})
	}
	// Names sort by time; a revision breaks a tie within one second.
	slices.SortFunc(out, func(a, b entry) int {
		ta, ra, _ := parseName(a.name)
		tb, rb, _ := parseName(b.name)
		if c := ta.Compare(tb); c != 0 {
			return c
		}
		return int(ra - rb)
	})
	return out, nil
}

// Reserve is what the space rule leaves free on the filesystem after a
// snapshot: a tenth of it, and at least 1 GiB. etcd's database (up to
// its 2 GiB default quota), its WAL and the node's logs share the state
// partition, and they must never be the ones to run out.
func Reserve(total uint64) uint64 { return max(total/10, 1<<30) }

// estimate is the room a new snapshot needs: the larger of the member's
// database file and the newest snapshot, plus a tenth for growth.
func estimate(dbSize int64, have []entry) uint64 {
	n := max(dbSize, 0)
	if len(have) > 0 {
		n = max(n, have[len(have)-1].size)
	}
	return uint64(n) + uint64(n)/10
}

// makeRoom decides which snapshots (have, oldest first) go before a new
// one of need bytes is written, so that the filesystem keeps Reserve
// free after it, and whether it then fits. The oldest go first, and
// never the newest: a snapshot in hand beats one that may not fit.
func makeRoom(u Usage, need uint64, have []entry) (remove []entry, fits bool) {
	free, want := u.Avail, need+Reserve(u.Total)
	for _, e := range have {
		if free >= want || len(remove) == len(have)-1 {
			break
		}
		remove = append(remove, e)
		free += uint64(e.size)
	}
	return remove, free >= want
}

// prunable is what goes after a new snapshot: all but the keep newest.
func prunable(have []entry, keep int) []entry {
	if len(have) <= keep {
		return nil
	}
	return have[:len(have)-keep]
}

// Take writes a new snapshot of m (whose client URL is endpoint) into
// the directory, after making room for it, then prunes to Keep. When
// the filesystem cannot spare the room even with only the newest
// snapshot left, it writes nothing and returns ErrSkipped, saying why.
func (d Dir) Take(ctx context.Context, m Member, endpoint string) (Snapshot, error) {
	if err := os.MkdirAll(d.Path, 0o700); err != nil {
		return Snapshot{}, fmt.Errorf("the snapshot directory: %w", err)
	}
	d.removeStaleTemp()
	have, err := d.list()
	if err != nil {
		return Snapshot{}, fmt.Errorf("the snapshot directory: %w", err)
	}
	st, err := statusOf(ctx, m, endpoint)
	if err != nil {
		return Snapshot{}, err
	}
	u, err := d.Disk.Usage(d.Path)
	if err != nil {
		return Snapshot{}, err
	}
	need := estimate(st.DbSize, have)
	remove, fits := makeRoom(u, need, have)
	for _, e := range remove {
		if err := d.remove(e); err != nil {
			return Snapshot{}, err
		}
		d.Log("removed %s to make room for a new snapshot", e.name)
	}
	if !fits {
		u, _ = d.Disk.Usage(d.Path)
		return Snapshot{}, fmt.Errorf("%w: %s free on the filesystem of %s, needs %s for the snapshot and %s left over; etcd's data comes first",
			ErrSkipped, bytesOf(u.Avail), d.Path, bytesOf(need), bytesOf(Reserve(u.Total)))
	}
	rev := st.Header.GetRevision()
	snap, err := save(ctx, m, filepath.Join(d.Path, Name(d.Now(), rev)), rev)
	if err != nil {
		return Snapshot{}, err
	}
	return snap, d.prune()
}

// prune removes all but the Keep newest snapshots.
func (d Dir) prune() error {
	have, err := d.list()
	if err != nil {
		return fmt.Errorf("pruning %s: %w", d.Path, err)
	}
	for _, e := range prunable(have, d.Keep) {
		if err := d.remove(e); err != nil {
			return err
		}
		d.Log("removed %s (keeping the %d newest)", e.name, d.Keep)
	}
	return nil
}

func (d Dir) remove(e entry) error {
	if err := os.Remove(filepath.Join(d.Path, e.name)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing an old snapshot: %w", err)
	}
	return nil
}

// removeStaleTemp removes what a snapshot interrupted by a crash or a
// power cut left: scheduled snapshots run one at a time (a oneshot
// service), so a temp file here is no running snapshot's.
func (d Dir) removeStaleTemp() {
	stale, _ := filepath.Glob(filepath.Join(d.Path, tempPattern))
	for _, p := range stale {
		if os.Remove(p) == nil {
			d.Log("removed %s, left by a snapshot that did not finish", filepath.Base(p))
		}
	}
}

// statusBound bounds the status call before a snapshot.
const statusBound = 10 * time.Second

func statusOf(ctx context.Context, m Member, endpoint string) (*clientv3.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, statusBound)
	defer cancel()
	st, err := m.Status(ctx, endpoint)
	if err != nil {
		return nil, fmt.Errorf("etcd status at %s: %w", endpoint, err)
	}
	return st, nil
}

// bytesOf is n in the largest binary unit that keeps it above 1.
func bytesOf(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
