package cluster

import (
	"path/filepath"

	"github.com/kiln-project/kiln/gen/nodeconfig"
	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
)

// AdminKubeconfig is the operator's admin.kubeconfig of a site whose PKI
// Configs made in pkiDir, exactly as kiln gen writes it.
func AdminKubeconfig(siteYAML, pkiDir string) ([]byte, error) {
	s, err := site.Parse(filepath.Join(pkiDir, "qemu-site.yaml"), []byte(siteYAML))
	if err != nil {
		return nil, err
	}
	return nodeconfig.AdminKubeconfigFor(s, pki.Store{Dir: pkiDir})
}
