// Package etcdsnapshot owns kiln's etcd snapshots: taking one through a
// member's client API, writing it durably (temp file, fsync, verify,
// publish without overwriting, fsync the directory), verifying the
// integrity hash etcd appends to it, and a master's directory of
// scheduled snapshots: their names, their pruning and the space rule
// that makes them give way before etcd's own data does.
package etcdsnapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kiln-project/kiln/internal/atomicfile"
)

// Member is what a snapshot needs of an etcd member (clientv3's
// Maintenance, on a client of that member's endpoint alone).
type Member interface {
	// SnapshotWithVersion streams a point-in-time snapshot of the
	// member's database, the revision it holds and the member's version.
	SnapshotWithVersion(ctx context.Context) (*clientv3.SnapshotResponse, error)
	// Status is the member's status at endpoint, its database size
	// among it.
	Status(ctx context.Context, endpoint string) (*clientv3.StatusResponse, error)
}

// Logf prints a progress line.
type Logf func(format string, args ...any)

// Snapshot is one snapshot written and verified.
type Snapshot struct {
	Path string
	Size int64
	// Revision is the store's revision the member reported just before
	// the snapshot, which holds it or a later one (the stream itself
	// does not say).
	Revision int64
	// Version is the storage version etcd gives the snapshot: the etcd
	// release a restore needs at least.
	Version string
	SHA256  string // of the whole file, hex, for the operator to compare copies
}

// ErrExists is the refusal of a path that holds a file already: kiln
// never overwrites a file it did not write.
var ErrExists = errors.New("etcdsnapshot: the file exists")

// tempPattern names a snapshot being written; only a scheduled
// directory's own stale ones are ever removed (staleTemp).
const tempPattern = ".etcd-snapshot-*.part"

func refuseExisting(path string) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s: %w: kiln does not overwrite a file; give another path or move it away", path, ErrExists)
	}
	return nil
}

// save streams a snapshot from m to path and verifies it, with revision
// as its Revision. Nothing is at path until the snapshot is whole,
// synced and verified; a failed save leaves nothing behind, and a path
// that exists is refused.
func save(ctx context.Context, m Member, path string, revision int64) (snap Snapshot, err error) {
	if err := refuseExisting(path); err != nil {
		return Snapshot{}, err
	}
	dir := filepath.Dir(path)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream when the write fails half way
	resp, err := m.SnapshotWithVersion(ctx)
	if err != nil {
		return Snapshot{}, fmt.Errorf("etcd snapshot: %w", err)
	}
	defer resp.Snapshot.Close()
	tmp, err := os.CreateTemp(dir, tempPattern)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, resp.Snapshot); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: receiving from etcd: %w", path, err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: fsync: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: %w", path, err)
	}
	// Read back from the file, not the stream: what is checked is what
	// a restore will read.
	v, err := Verify(tmp.Name())
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s as written: %w", path, err)
	}
	if err := publish(tmp.Name(), path); err != nil {
		return Snapshot{}, err
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: fsync of %s: %w", path, dir, err)
	}
	return Snapshot{Path: path, Size: v.Size, Revision: revision, Version: resp.Version, SHA256: v.SHA256}, nil
}

// publish gives the finished temp file its name without replacing a file
// there: a hard link fails on an existing name, where a rename would
// not. A filesystem without hard links gets a check then a rename.
func publish(tmp, path string) error {
	err := os.Link(tmp, path)
	switch {
	case err == nil:
		os.Remove(tmp)
		return nil
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("%s: %w: kiln does not overwrite it", path, ErrExists)
	}
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s: %w: kiln does not overwrite it", path, ErrExists)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("snapshot %s: %w", path, err)
	}
	return nil
}
