package nodeconfig

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"testing"

	"github.com/coreos/ignition/v2/config/v3_5/types"

	"github.com/kiln-project/kiln/contract/etcdsnapshot"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/firstboot/ignite"
	"github.com/kiln-project/kiln/gen/site"
)

// Only the genesis node's config carries the snapshot, as a root-only
// file whose content the agent verifies (gzip undone) before writing
// it, and only its node file says it restores.
func TestOnlyTheGenesisConfigCarriesTheSnapshot(t *testing.T) {
	snapshot := bytes.Repeat([]byte("etcd"), 2048)
	sum := sha256.Sum256(snapshot)
	hexSum := hex.EncodeToString(sum[:])
	url := "https://backups.lab/snap.db"
	for _, tc := range []struct {
		name    string
		restore site.RestoreFrom
		source  string // "" for embedded
	}{
		{"embedded", site.RestoreFrom{File: "snap.db", SHA256: hexSum, Snapshot: snapshot}, ""},
		{"fetched", site.RestoreFrom{URL: url, SHA256: hexSum, AllowUnknownCluster: true}, url},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := exampleSite(t)
			s.Cluster.RestoreFrom = &tc.restore
			st := freshPKI(t, s)
			for _, n := range s.Nodes {
				data, err := Render(s, st, n)
				if err != nil {
					t.Fatal(err)
				}
				cfg := decode(t, data)
				i := slices.IndexFunc(cfg.Storage.Files, func(f types.File) bool { return f.Path == etcdsnapshot.Path })
				nf := readNodeFile(t, cfg)
				if n.Role != site.RoleGenesis {
					if i >= 0 || nf.Restore != nil {
						t.Errorf("%s (%s) carries the snapshot or a restore", n.Name, n.Role)
					}
					continue
				}
				if i < 0 {
					t.Fatalf("genesis %s has no %s", n.Name, etcdsnapshot.Path)
				}
				f := cfg.Storage.Files[i]
				if h := f.Contents.Verification.Hash; h == nil || *h != "sha256-"+hexSum || *f.Mode != 0o600 {
					t.Errorf("%s: hash %v, mode %o; want sha256-%s, 0600", f.Path, h, *f.Mode, hexSum)
				}
				want := nodefile.Restore{Path: etcdsnapshot.Path, SHA256: hexSum, AllowUnknownCluster: tc.restore.AllowUnknownCluster}
				if nf.Restore == nil || *nf.Restore != want {
					t.Errorf("node file restore %+v, want %+v", nf.Restore, want)
				}
				if tc.source != "" {
					if *f.Contents.Source != tc.source {
						t.Errorf("source %q, want %q", *f.Contents.Source, tc.source)
					}
					continue
				}
				plan, err := ignite.NewPlan(context.Background(), types.Config{Storage: types.Storage{Files: []types.File{f}}}, ignite.Sources{})
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(plan.Files[0].Contents, snapshot) {
					t.Errorf("the agent resolves %d bytes, not the snapshot's %d", len(plan.Files[0].Contents), len(snapshot))
				}
			}
		})
	}
}

func readNodeFile(t *testing.T, cfg types.Config) nodefile.NodeFile {
	t.Helper()
	i := slices.IndexFunc(cfg.Storage.Files, func(f types.File) bool { return f.Path == NodeFilePath })
	var nf nodefile.NodeFile
	if err := json.Unmarshal(contents(t, cfg.Storage.Files[i]), &nf); err != nil {
		t.Fatal(err)
	}
	return nf
}
