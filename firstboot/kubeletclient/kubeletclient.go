// Package kubeletclient is how the agent talks to the cluster as its
// node's kubelet: the kubelet's kubeconfig, with the client certificate
// the kubelet holds now.
//
// The kubeconfig carries the certificate kiln gen issued. The kubelet
// renews it through the cluster and keeps the renewed one in its own
// store; from then on only the store's is good for long, and once the
// first has expired the apiserver refuses it. A client built from the
// kubeconfig alone therefore stops working one certificate life after the
// node was provisioned, while the kubelet itself goes on.
package kubeletclient

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kiln-project/kiln/contract/nodefile"
)

// Current is the kubelet's store of its client certificate: the one it
// uses now, certificate and key in one file (a link the kubelet moves
// to each renewed pair).
const Current = "/var/lib/kubelet/pki/kubelet-client-current.pem"

// Kubeconfig is the kubelet's kubeconfig, as kiln gen writes it.
const Kubeconfig = nodefile.KubeconfigDir + "/kubelet.conf"

// Config is the kubelet's client configuration on the node under root:
// the kubeconfig's server and CA, and the certificate in Current when the
// kubelet has stored one (the kubelet does the same), else the
// kubeconfig's own.
func Config(root string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(root, Kubeconfig))
	if err != nil {
		return nil, fmt.Errorf("the kubelet's kubeconfig %s: %w", Kubeconfig, err)
	}
	current := filepath.Join(root, Current)
	switch _, err := os.Stat(current); {
	case err == nil:
		cfg.TLSClientConfig.CertData, cfg.TLSClientConfig.KeyData = nil, nil
		cfg.TLSClientConfig.CertFile, cfg.TLSClientConfig.KeyFile = current, current
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("the kubelet's client certificate %s: %w", Current, err)
	}
	cfg.Timeout = 30 * time.Second
	return cfg, nil
}

// New is a client of the cluster as the kubelet of the node under root
// (Config): what NodeRestriction lets a kubelet do.
func New(root string) (kubernetes.Interface, error) {
	cfg, err := Config(root)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}
