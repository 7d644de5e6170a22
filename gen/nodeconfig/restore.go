package nodeconfig

import (
	"bytes"
	"compress/gzip"

	"github.com/coreos/ignition/v2/config/v3_5/types"

	"github.com/kiln-project/kiln/contract/etcdsnapshot"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/gen/site"
)

// restoreFile is the genesis node's snapshot to restore from, when the
// site names one: embedded gzip-compressed, or fetched from its URL,
// and either way checked by the agent against the snapshot's SHA-256
// before it is written (so a snapshot that fails its hash changes
// nothing on the node).
func restoreFile(s *site.Site, n site.Node) (types.File, bool, error) {
	r := s.Cluster.RestoreFrom
	if r == nil || n.Role != site.RoleGenesis {
		return types.File{}, false, nil
	}
	f := file(etcdsnapshot.Path, nil, true)
	hash := "sha256-" + r.SHA256
	f.Contents.Verification.Hash = &hash
	if r.URL != "" {
		f.Contents.Source = &r.URL
		return f, true, nil
	}
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed)
	if _, err := zw.Write(r.Snapshot); err != nil {
		return types.File{}, false, err
	}
	if err := zw.Close(); err != nil {
		return types.File{}, false, err
	}
	gz := "gzip"
	embedded := file(etcdsnapshot.Path, b.Bytes(), true)
	f.Contents.Source, f.Contents.Compression = embedded.Contents.Source, &gz
	return f, true, nil
}

// restoreOf is what the genesis node file says of the snapshot.
func restoreOf(s *site.Site, n site.Node) *nodefile.Restore {
	r := s.Cluster.RestoreFrom
	if r == nil || n.Role != site.RoleGenesis {
		return nil
	}
	return &nodefile.Restore{Path: etcdsnapshot.Path, SHA256: r.SHA256, AllowUnknownCluster: r.AllowUnknownCluster}
}
