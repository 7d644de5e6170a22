// Package manifests owns the Kubernetes objects and component configs kiln
// puts on a node, as typed objects rendered to YAML: the control plane's
// static pods, the node-local CoreDNS (static pod and Corefile) and the
// kubelet's configuration. Everything is derived from the node file and
// the images baked into the node image.
package manifests

import (
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// Paths on the node. The static pod directory and the live discovery
// zone are on the state partition: they must survive a reboot with no
// apiserver.
const (
	StaticPodDir   = "/var/lib/kiln/manifests"
	PKIDir         = nodefile.PKIDir
	KubeconfigDir  = nodefile.KubeconfigDir
	DNSDir         = "/var/lib/kiln/dns"
	ZoneFile       = DNSDir + "/discovery.zone"
	CorefilePath   = DNSDir + "/Corefile"
	PodResolvConf  = "/etc/kiln/resolv.pods.conf"
	EtcdDataDir    = "/var/lib/etcd"
	ContainerdSock = "unix:///run/containerd/containerd.sock"
)

// Images are the references of the container images baked into the node
// image, as containerd knows them after import.
type Images struct {
	Etcd, APIServer, ControllerManager, Scheduler, Proxy, CoreDNS, Pause, Kiln string
}

// Params is everything the manifests are rendered from.
type Params struct {
	Node   nodefile.NodeFile
	Images Images
	// EtcdInitialCluster and EtcdClusterState come from the node's etcd
	// membership record: a genesis node starts a new cluster of one, a
	// joining master lists the members its learner add returned.
	EtcdInitialCluster string
	EtcdClusterState   string // "new" or "existing"
}

// ForNode are the parameters of node n's manifests, with its etcd
// membership record (the zero record for a node without a member).
func ForNode(n nodefile.NodeFile, img Images, m etcdmember.Membership) Params {
	return Params{Node: n, Images: img, EtcdInitialCluster: m.InitialCluster(), EtcdClusterState: m.State}
}

// GenesisParams are the parameters of a genesis node before it
// bootstrapped: a new etcd cluster of itself.
func GenesisParams(n nodefile.NodeFile, img Images) Params {
	return ForNode(n, img, etcdmember.Genesis(n.Name, n.Address))
}

func pki(name string) string        { return PKIDir + "/" + name }
func kubeconfig(name string) string { return KubeconfigDir + "/" + name + ".conf" }

// sampleNode is a genesis node with every field set: what the builder
// renders the manifests for to list the images they reference.
func sampleNode() nodefile.NodeFile {
	return nodefile.NodeFile{
		Name: "sample", Role: "genesis", Address: "192.0.2.10",
		Cluster: nodefile.ClusterParams{Name: "sample", Domain: "cluster.local", PodCIDR: "10.244.0.0/16",
			ServiceCIDR: "10.96.0.0/12", ClusterDNS: "10.96.0.10", APIServerPort: 6443,
			DiscoveryName: "kube-apiserver.kiln.internal", NodeLocalDNS: "169.254.20.10"},
		Masters: []nodefile.Member{{Name: "sample", Address: "192.0.2.10"}},
	}
}
