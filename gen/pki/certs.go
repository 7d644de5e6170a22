// Package pki owns a cluster's certificates: the declarative list of the
// CAs and leaf certificates a site needs, the one measure of whether a
// certificate on disk is still the one the site asks for (used by kiln gen
// to reuse it and by kiln pki check to report it), issuing with cfssl
// (in-process), and checking and renewing what exists. The PKI lives in a
// directory the operator keeps: kiln writes over a leaf only to re-issue
// it, after copying the old pair to backup/<time>/, never writes over a CA
// or the service-account key, and never deletes a file.
package pki

import (
	"fmt"
	"net/netip"
	"sort"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/gen/site"
)

// CA is a certificate authority, by the stem of its files in the PKI
// directory (<stem>.crt, <stem>.key).
type CA struct {
	Stem string
	CN   string
}

// The cluster's CAs.
var (
	KubernetesCA = CA{"ca", "kubernetes-ca"}
	EtcdCA       = CA{"etcd/ca", "etcd-ca"}
	FrontProxyCA = CA{"front-proxy-ca", "front-proxy-ca"}
	CAs          = []CA{KubernetesCA, EtcdCA, FrontProxyCA}
)

// ServiceAccountKey is the stem of the service-account key pair (sa.key,
// sa.pub): the apiserver signs tokens with it, not a CA.
const ServiceAccountKey = "sa"

// Leaf is one leaf certificate: its files' stem, its CA, subject,
// subject alternative names and what it authenticates.
type Leaf struct {
	Stem   string
	CA     CA
	CN     string
	Orgs   []string
	Hosts  []string // DNS names and IP addresses
	Server bool     // TLS server auth
	Client bool     // TLS client auth
}

// The operator's credentials: admin is in the cluster-admins group, which
// RBAC binds to cluster-admin; super-admin is in system:masters, which no
// authorizer can refuse, for when RBAC is broken. Neither goes to a node.
const (
	AdminStem      = "admin"
	SuperAdminStem = "super-admin"
)

// NodeStem is the stem of a node's own certificate named what, e.g.
// nodes/m1/kubelet-client.
func NodeStem(node, what string) string { return nodesDir + "/" + node + "/" + what }

// nodesDir holds a directory per node.
const nodesDir = "nodes"

// Leaves lists every leaf certificate the site needs, in a fixed order:
// the cluster-wide control-plane clients, then each node's own.
func Leaves(s *site.Site) []Leaf {
	leaves := []Leaf{
		{Stem: "apiserver-kubelet-client", CA: KubernetesCA, CN: "kube-apiserver-kubelet-client", Orgs: []string{"system:masters"}, Client: true},
		{Stem: "apiserver-etcd-client", CA: EtcdCA, CN: "kube-apiserver-etcd-client", Client: true},
		{Stem: "front-proxy-client", CA: FrontProxyCA, CN: "front-proxy-client", Client: true},
		{Stem: "controller-manager", CA: KubernetesCA, CN: "system:kube-controller-manager", Client: true},
		{Stem: "scheduler", CA: KubernetesCA, CN: "system:kube-scheduler", Client: true},
		{Stem: AdminStem, CA: KubernetesCA, CN: "kubernetes-admin", Orgs: []string{nodefile.ClusterAdminsGroup}, Client: true},
		{Stem: SuperAdminStem, CA: KubernetesCA, CN: "kubernetes-super-admin", Orgs: []string{"system:masters"}, Client: true},
	}
	for _, n := range s.Nodes {
		leaves = append(leaves, NodeLeaves(s, n)...)
	}
	return leaves
}

// NodeLeaves lists the certificates that belong to one node: every node's
// kubelet client certificate and a static node's kubelet serving
// certificate (a DHCP node's kubelet requests one from the cluster once
// its address is known); a master's apiserver serving
// certificate, its etcd server and peer certificates, and its agent's
// client certificate (system:masters: the agent binds the cluster-admins
// group before anything else can).
func NodeLeaves(s *site.Site, n site.Node) []Leaf {
	nodeHosts := []string{n.Name}
	leaves := []Leaf{
		{Stem: NodeStem(n.Name, "kubelet-client"), CA: KubernetesCA, CN: "system:node:" + n.Name, Orgs: []string{"system:nodes"}, Client: true},
	}
	if ip := n.IP(); ip.IsValid() {
		nodeHosts = append(nodeHosts, ip.String())
		leaves = append(leaves, Leaf{Stem: NodeStem(n.Name, "kubelet-server"), CA: KubernetesCA, CN: "system:node:" + n.Name, Orgs: []string{"system:nodes"}, Hosts: nodeHosts, Server: true})
	}
	if !n.IsMaster() {
		return leaves
	}
	local := []string{"localhost", "127.0.0.1", "::1"}
	return append(leaves,
		Leaf{Stem: NodeStem(n.Name, "apiserver"), CA: KubernetesCA, CN: "kube-apiserver", Hosts: APIServerHosts(s, n), Server: true},
		Leaf{Stem: NodeStem(n.Name, "etcd-server"), CA: EtcdCA, CN: n.Name, Hosts: append(append([]string{}, nodeHosts...), local...), Server: true, Client: true},
		Leaf{Stem: NodeStem(n.Name, "etcd-peer"), CA: EtcdCA, CN: n.Name, Hosts: nodeHosts, Server: true, Client: true},
		Leaf{Stem: NodeStem(n.Name, "agent"), CA: KubernetesCA, CN: "kiln-agent:" + n.Name, Orgs: []string{"system:masters"}, Client: true},
	)
}

// APIServerHosts are the names a master's apiserver answers to: the
// discovery name every kubeconfig uses, every master's address, the first
// service address and the in-cluster names of the kubernetes service, and
// loopback.
func APIServerHosts(s *site.Site, self site.Node) []string {
	c := s.Cluster
	hosts := []string{
		c.DiscoveryName, self.Name,
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + c.Domain,
		"localhost",
	}
	ips := []netip.Addr{c.ServiceIP(1), netip.MustParseAddr("127.0.0.1")}
	for _, m := range s.Masters() {
		ips = append(ips, m.IP())
	}
	sort.Slice(ips, func(i, j int) bool { return ips[i].Less(ips[j]) })
	for i, ip := range ips {
		if ip.IsValid() && (i == 0 || ip != ips[i-1]) {
			hosts = append(hosts, ip.String())
		}
	}
	return hosts
}

func (l Leaf) usages() []string {
	u := []string{"signing", "digital signature", "key encipherment"}
	if l.Server {
		u = append(u, "server auth")
	}
	if l.Client {
		u = append(u, "client auth")
	}
	return u
}

func (l Leaf) String() string { return fmt.Sprintf("%s (CN=%s, CA %s)", l.Stem, l.CN, l.CA.Stem) }
