package nodeconfig

import (
	"path"
	"slices"
	"strings"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/registries"
	"github.com/kiln-project/kiln/gen/site"
)

// The PKI files each role receives, by their name in the PKI directory
// ({node} is the node's own name). A node gets its own certificates and
// nothing of another node's; a worker gets no CA key, no etcd material
// and no service-account key.
var (
	everyNode = []string{
		"ca.crt",
		"nodes/{node}/kubelet-client.crt", "nodes/{node}/kubelet-client.key",
	}
	// A DHCP node's kubelet requests its serving certificate instead.
	staticNodes = []string{"nodes/{node}/kubelet-server.crt", "nodes/{node}/kubelet-server.key"}
	mastersOnly = []string{
		"ca.key", // the controller-manager signs kubelet certificate requests
		"etcd/ca.crt", "front-proxy-ca.crt",
		"sa.key", "sa.pub",
		"apiserver-kubelet-client.crt", "apiserver-kubelet-client.key",
		"apiserver-etcd-client.crt", "apiserver-etcd-client.key",
		"front-proxy-client.crt", "front-proxy-client.key",
		"nodes/{node}/apiserver.crt", "nodes/{node}/apiserver.key",
		"nodes/{node}/etcd-server.crt", "nodes/{node}/etcd-server.key",
		"nodes/{node}/etcd-peer.crt", "nodes/{node}/etcd-peer.key",
	}
)

// kubeconfig is a kubeconfig a role receives: its file name under
// KubeconfigDir, the client certificate it carries, and whether it
// reaches this master's own apiserver rather than any through the
// discovery name.
type kubeconfig struct {
	name, stem string
	local      bool
}

var (
	everyNodeKubeconfigs = []kubeconfig{{name: "kubelet.conf", stem: "nodes/{node}/kubelet-client"}}
	// The controller-manager and the scheduler talk to their own master's
	// apiserver, as kubeadm's do: while a rollout moves the masters to
	// the next minor one at a time, neither is ever newer than the
	// apiserver it talks to. Both start once that apiserver is ready.
	masterKubeconfigs = []kubeconfig{
		{name: "controller-manager.conf", stem: "controller-manager", local: true},
		{name: "scheduler.conf", stem: "scheduler", local: true},
		{name: path.Base(nodefile.AgentKubeconfig), stem: "nodes/{node}/agent"},
	}
)

// grantedFile is one PKI file as it lands on the node.
type grantedFile struct {
	from string // name in the PKI directory
	to   string // path on the node
}

// grantsFor lists the PKI files node n receives.
func grantsFor(n site.Node) []grantedFile {
	names := slices.Clone(everyNode)
	if n.IP().IsValid() {
		names = append(names, staticNodes...)
	}
	if n.IsMaster() {
		names = append(names, mastersOnly...)
	}
	out := make([]grantedFile, 0, len(names))
	for _, name := range names {
		from := strings.ReplaceAll(name, "{node}", n.Name)
		to := path.Join(PKIDir, strings.TrimPrefix(name, "nodes/{node}/"))
		out = append(out, grantedFile{from, to})
	}
	return out
}

func kubeconfigsFor(n site.Node) []kubeconfig {
	list := everyNodeKubeconfigs
	if n.IsMaster() {
		list = append(append([]kubeconfig{}, list...), masterKubeconfigs...)
	}
	out := make([]kubeconfig, len(list))
	for i, k := range list {
		out[i] = kubeconfig{k.name, strings.ReplaceAll(k.stem, "{node}", n.Name), k.local}
	}
	return out
}

// isSecret reports whether a node file holds key material: private keys,
// kubeconfigs (which embed one), the encryption configuration and the
// registry mirrors' logins.
func isSecret(nodePath string) bool {
	return strings.HasSuffix(nodePath, ".key") || strings.HasPrefix(nodePath, KubeconfigDir+"/") ||
		nodePath == EncryptionConfigPath || nodePath == registries.CredentialsFile
}
