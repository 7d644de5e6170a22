// Package etcdrestore owns restoring a genesis master's etcd data from a
// snapshot of a lost cluster, once, before its etcd first starts: the
// checks that refuse a snapshot before anything is written (its hashes,
// the cluster it comes from), the restore itself (etcdutl's, with a new
// cluster token, the revision bumped and marked compacted), and the
// record that tells a restore cut short by a power cut from etcd data
// the restore must not replace.
package etcdrestore

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/kiln-project/kiln/contract/etcdsnapshot"
	"github.com/kiln-project/kiln/internal/atomicfile"
)

// RevisionBump is added to the snapshot's latest revision, which is
// then marked compacted, as etcdutl snapshot restore --bump-revision
// --mark-compacted does: the cluster's revisions must never go back,
// or a Kubernetes watch or informer resuming from a revision the lost
// cluster reached after the snapshot would miss every change up to it.
// A compacted revision sends every such watch back to a full list. One
// billion is etcdutl's own suggestion, more writes than a cluster makes
// in years.
const RevisionBump = 1_000_000_000

// RecordPath is the restore's record on the state partition, written
// just before the restored data goes into place: with etcd's data there
// and no "restored" stamp yet, it says the data is the restore's.
const RecordPath = "/var/lib/kiln/etcd/restore.json"

// tempDir is where the restore writes, inside etcd's data directory: a
// bind mount of the state partition, so only a rename within it is
// atomic. The restore ends by renaming its member directory into place.
const tempDir = ".kiln-restore"

// Request is one restore.
type Request struct {
	// Root is the machine's root ("/" on a node).
	Root string
	// Snapshot is the snapshot's path and SHA256 its hash, as the node
	// file gives them.
	Snapshot, SHA256 string
	// DataDir is etcd's data directory.
	DataDir string
	// Name and PeerURL are the genesis member's.
	Name, PeerURL string
	// Cluster is the node's own cluster: a snapshot of another is
	// refused.
	Cluster etcdsnapshot.Identity
	// AllowUnknownCluster restores a snapshot that names no cluster.
	AllowUnknownCluster bool
}

// Record is what the restore wrote.
type Record struct {
	SnapshotSHA256 string `json:"snapshotSHA256"`
	Revision       int64  `json:"revision"`
	BumpedTo       int64  `json:"bumpedTo"`
}

// Action is what the restore does on this boot.
type Action int

const (
	// Restore: etcd has no data yet.
	Restore Action = iota
	// Finished: the data is this restore's, put in place by a boot cut
	// short before it was stamped.
	Finished
	// Refuse: etcd has data that no restore of this snapshot wrote.
	Refuse
)

// Decide is the restore's decision on a boot whose restore is not
// stamped yet, from whether etcd has data and the restore's record
// (nil: none).
func Decide(hasData bool, rec *Record, sha256 string) Action {
	switch {
	case !hasData:
		return Restore
	case rec != nil && rec.SnapshotSHA256 == sha256:
		return Finished
	}
	return Refuse
}

// ErrForeign is a snapshot of another cluster, or one that does not
// say which cluster it is when that was not allowed.
var ErrForeign = errors.New("snapshot of another cluster")

// Run restores the snapshot into the data directory, unless the
// decision says otherwise; a refusal changes nothing.
func Run(req Request) (Record, Action, error) {
	data := filepath.Join(req.Root, req.DataDir)
	_, err := os.Stat(filepath.Join(data, "member"))
	hasData := err == nil
	rec, err := ReadRecord(req.Root)
	if err != nil {
		return Record{}, Refuse, err
	}
	switch Decide(hasData, rec, req.SHA256) {
	case Finished:
		return *rec, Finished, os.RemoveAll(filepath.Join(data, tempDir))
	case Refuse:
		return Record{}, Refuse, fmt.Errorf("etcd's data directory %s holds a member that no restore of this snapshot wrote: not restoring over it "+
			"(a genesis machine restores only onto a blank state disk: re-image it)", req.DataDir)
	}
	c, err := check(req)
	if err != nil {
		return Record{}, Refuse, err
	}
	out := Record{SnapshotSHA256: req.SHA256, Revision: c.Revision, BumpedTo: c.Revision + RevisionBump}
	return out, Restore, restore(req, data, out)
}

// check refuses, before anything is written, a snapshot that fails its
// hashes or comes from another cluster; it returns what it read.
func check(req Request) (contents, error) {
	path := filepath.Join(req.Root, req.Snapshot)
	sum, err := etcdsnapshot.Check(path)
	if err != nil {
		return contents{}, err
	}
	if !strings.EqualFold(sum, req.SHA256) {
		return contents{}, fmt.Errorf("%s: %w: SHA-256 %s, the node file says %s", req.Snapshot, etcdsnapshot.ErrIntegrity, sum, req.SHA256)
	}
	c, err := readContents(path)
	if err != nil {
		return contents{}, err
	}
	switch id := c.Identity; {
	case id == nil && req.AllowUnknownCluster:
	case id == nil:
		return contents{}, fmt.Errorf("%s: %w? it holds no %s/%s ConfigMap (taken before kiln recorded the cluster's identity, or not a kiln cluster's): "+
			"if it is this cluster's, set cluster.restoreFrom.allowUnknownCluster: true and run kiln gen again",
			req.Snapshot, ErrForeign, etcdsnapshot.IdentityNamespace, etcdsnapshot.IdentityName)
	case id.Cluster != req.Cluster.Cluster:
		return contents{}, fmt.Errorf("%s: %w: the snapshot is of cluster %q, this node's cluster is %q", req.Snapshot, ErrForeign, id.Cluster, req.Cluster.Cluster)
	case id.CASHA256 != req.Cluster.CASHA256:
		return contents{}, fmt.Errorf("%s: %w: the snapshot's cluster %q has the Kubernetes CA with SHA-256 %s, this node's CA has %s (run kiln gen with the lost cluster's PKI directory)",
			req.Snapshot, ErrForeign, id.Cluster, id.CASHA256, req.Cluster.CASHA256)
	}
	return c, nil
}

// restore writes the member into a temporary directory, records the
// restore, then renames the member into place and syncs the directory.
func restore(req Request, data string, rec Record) error {
	tmp := filepath.Join(data, tempDir)
	if err := os.RemoveAll(tmp); err != nil { // a restore cut short before its rename
		return err
	}
	if err := os.MkdirAll(data, 0o700); err != nil {
		return err
	}
	token, err := clusterToken()
	if err != nil {
		return err
	}
	err = snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        filepath.Join(req.Root, req.Snapshot),
		Name:                req.Name,
		OutputDataDir:       tmp,
		PeerURLs:            []string{req.PeerURL},
		InitialCluster:      req.Name + "=" + req.PeerURL,
		InitialClusterToken: token,
		RevisionBump:        RevisionBump,
		MarkCompacted:       true,
	})
	if err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("restoring %s: %w", req.Snapshot, err)
	}
	if err := syncTree(tmp); err != nil {
		return err
	}
	if err := writeRecord(req.Root, rec); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(tmp, "member"), filepath.Join(data, "member")); err != nil {
		return fmt.Errorf("putting the restored member in place: %w", err)
	}
	if err := atomicfile.SyncDir(data); err != nil {
		return err
	}
	return os.RemoveAll(tmp)
}

// clusterToken is a new initial-cluster-token: etcd derives the member
// and cluster IDs from it, so the restored cluster is a new one that no
// member of the lost cluster can rejoin.
func clusterToken() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "kiln-restore-" + hex.EncodeToString(b), nil
}

// syncTree fsyncs every file and directory under dir: etcdutl syncs the
// WAL and the database, not every directory they are in.
func syncTree(dir string) error {
	return filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Sync(); err != nil {
			return fmt.Errorf("syncing %s: %w", p, err)
		}
		return nil
	})
}

// ReadRecord reads the restore's record under root; nil when there is
// none.
func ReadRecord(root string) (*Record, error) {
	p := filepath.Join(root, RecordPath)
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &r, nil
}

func writeRecord(root string, r Record) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(root, RecordPath), append(data, '\n'), 0o600, nil)
}
