package nodeconfig

import (
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/internal/ignition"
	"github.com/kiln-project/kiln/internal/outdir"
)

// Output names under the output directory.
const (
	NodesDir             = "nodes"
	AdminKubeconfig      = "admin.kubeconfig"
	SuperAdminKubeconfig = "super-admin.kubeconfig"
)

// Result says what a Generate run did.
type Result struct {
	PKI   pki.Changes  // what this run issued and re-issued
	Nodes []NodeConfig // node configs written
}

// NodeConfig is one node's config as written.
type NodeConfig struct {
	Path string // nodes/<name>.ign under the output directory
	// Hash is the config's sha512 as the kernel argument
	// kiln.config.hash= takes it, also written to Path + HashSuffix.
	Hash string
	// Replaced is the hash of the different config Path held before,
	// which this one names to fall back to; "" when there was none or
	// it is unchanged.
	Replaced string
}

// HashSuffix names the file beside each config that holds its hash.
const HashSuffix = ".sha512"

// writeOperatorKubeconfigs writes admin.kubeconfig and the break-glass
// super-admin.kubeconfig into the staged output, root-only.
func writeOperatorKubeconfigs(s *site.Site, st pki.Store, stage string) error {
	for _, k := range []struct {
		name   string
		render func(*site.Site, pki.Store) ([]byte, error)
	}{
		{AdminKubeconfig, AdminKubeconfigFor},
		{SuperAdminKubeconfig, SuperAdminKubeconfigFor},
	} {
		data, err := k.render(s, st)
		if err != nil {
			return fmt.Errorf("%s: %w", k.name, err)
		}
		if err := atomicfile.WriteFile(filepath.Join(stage, k.name), data, 0o600, nil); err != nil {
			return err
		}
	}
	return nil
}

// Generate makes the PKI hold everything the site needs, as the site
// asks for it now (pki.Store.Ensure: what only the operator can fix is
// refused before the PKI is written to), renders every node's config, and
// only when all of them validate puts them at out (nodes/<name>.ign, its
// sha512 in nodes/<name>.ign.sha512, admin.kubeconfig,
// super-admin.kubeconfig and the marker listing them) in one rename. A failed run leaves the previous output as it was. out is
// replaced only when it is missing, empty or kiln gen's own output, and
// never when that would take the PKI, the site file or the current
// directory with it: anything else is an *outdir.Refusal, before the PKI
// or out is touched. A node config that replaces a different one in out
// names the one it replaces in its node file's fallbackConfigs
// (renderAfter).
func Generate(s *site.Site, st pki.Store, out string) (Result, error) {
	var res Result
	out = filepath.Clean(out)
	if err := checkOutput(out, s, st); err != nil {
		return res, err
	}
	changes, err := st.Ensure(s)
	res.PKI = changes
	if err != nil {
		return res, fmt.Errorf("PKI in %s: %w", st.Dir, err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return res, err
	}
	stage, err := os.MkdirTemp(filepath.Dir(out), "."+filepath.Base(out)+".kiln-gen-")
	if err != nil {
		return res, fmt.Errorf("staging the output: %w", err)
	}
	defer os.RemoveAll(stage)
	if err := os.Chmod(stage, 0o700); err != nil {
		return res, err
	}
	written := []string{AdminKubeconfig, SuperAdminKubeconfig}
	for _, n := range s.Nodes {
		rel := path.Join(NodesDir, n.Name+".ign")
		old, err := readOld(filepath.Join(out, rel))
		if err != nil {
			return res, fmt.Errorf("node %s: %w", n.Name, err)
		}
		data, replaced, err := renderAfter(s, st, n, old)
		if err != nil {
			return res, err
		}
		hash := ignition.Hash(data)
		if err := atomicfile.WriteFile(filepath.Join(stage, rel), data, 0o600, nil); err != nil {
			return res, err
		}
		if err := atomicfile.WriteFile(filepath.Join(stage, rel+HashSuffix), []byte(hash+"\n"), 0o644, nil); err != nil {
			return res, err
		}
		written = append(written, rel, rel+HashSuffix)
		res.Nodes = append(res.Nodes, NodeConfig{Path: filepath.Join(out, rel), Hash: hash, Replaced: replaced})
	}
	if err := writeOperatorKubeconfigs(s, st, stage); err != nil {
		return res, err
	}
	if err := outdir.WriteMarker(stage, outdir.Marker{Kind: MarkerKind, Paths: written}); err != nil {
		return res, err
	}
	if err := checkContent(out); err != nil { // it may have changed while the configs rendered
		return res, err
	}
	if err := atomicfile.ReplaceDir(stage, out); err != nil {
		return res, err
	}
	return res, nil
}
