package nodeconfig

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/pki"
	"github.com/kiln-project/kiln/site"
)

// Output names under the output directory.
const (
	NodesDir        = "nodes"
	AdminKubeconfig = "admin.kubeconfig"
)

// Result says what a Generate run did.
type Result struct {
	Issued []string // PKI stems created in this run
	Nodes  []string // node config paths written
}

// Generate makes sure the PKI holds everything the site needs, renders
// every node's config, and only when all of them validate puts them at
// out (nodes/<name>.ign and admin.kubeconfig) in one rename. A failed run
// leaves the previous output as it was.
func Generate(s *site.Site, st pki.Store, out string) (Result, error) {
	var res Result
	issued, err := st.Ensure(s)
	res.Issued = issued
	if err != nil {
		return res, fmt.Errorf("PKI in %s: %w", st.Dir, err)
	}
	out = filepath.Clean(out)
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
	for _, n := range s.Nodes {
		data, err := Render(s, st, n)
		if err != nil {
			return res, err
		}
		rel := filepath.Join(NodesDir, n.Name+".ign")
		if err := atomicfile.WriteFile(filepath.Join(stage, rel), data, 0o600, nil); err != nil {
			return res, err
		}
		res.Nodes = append(res.Nodes, filepath.Join(out, rel))
	}
	admin, err := AdminKubeconfigFor(s, st)
	if err != nil {
		return res, fmt.Errorf("admin kubeconfig: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(stage, AdminKubeconfig), admin, 0o600, nil); err != nil {
		return res, err
	}
	if err := atomicfile.ReplaceDir(stage, out); err != nil {
		return res, err
	}
	return res, nil
}
