// Package nodeconfig turns a site and its PKI into one Ignition config per
// node: hostname, networkd files, SSH keys, the node's certificates and
// kubeconfigs (only what its role needs), the seed discovery zone and the
// kiln node file that tells the agent its role. Generate writes them all
// or nothing.
package nodeconfig

import (
	"github.com/kiln-project/kiln/discovery"
	"github.com/kiln-project/kiln/site"
)

// Paths on the node, as docs/architecture.md fixes them.
const (
	NodeFilePath   = "/etc/kiln/node.json"
	PKIDir         = "/etc/kiln/pki"
	KubeconfigDir  = "/etc/kiln/kubeconfig"
	ZonePath       = "/etc/kiln/discovery.zone"
	NetworkPath    = "/etc/systemd/network/10-kiln.network"
	HostnamePath   = "/etc/hostname"
	IgnitionSpec   = "3.5.0"
	NodeFileKind   = "Node"
	StatePartLabel = "KILN-STATE"
)

// NodeFile is /etc/kiln/node.json: what the agent needs to know about the
// node's role and the cluster, beyond the files the config writes.
type NodeFile struct {
	APIVersion  string            `json:"apiVersion"`
	Kind        string            `json:"kind"`
	Name        string            `json:"name"`
	Role        string            `json:"role"`
	Address     string            `json:"address,omitempty"`
	InstallDisk string            `json:"installDisk,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Taints      []site.Taint      `json:"taints,omitempty"`
	Cluster     ClusterParams     `json:"cluster"`
	Masters     []Member          `json:"masters"`
}

// ClusterParams are the cluster-wide settings a node's components use.
type ClusterParams struct {
	Name              string   `json:"name"`
	KubernetesVersion string   `json:"kubernetesVersion"`
	Domain            string   `json:"domain"`
	PodCIDR           string   `json:"podCIDR"`
	ServiceCIDR       string   `json:"serviceCIDR"`
	ClusterDNS        string   `json:"clusterDNS"`
	APIServerPort     int      `json:"apiServerPort"`
	DiscoveryName     string   `json:"discoveryName"`
	NodeLocalDNS      string   `json:"nodeLocalDNS"`
	UpstreamDNS       []string `json:"upstreamDNS,omitempty"`
	NTPServers        []string `json:"ntpServers,omitempty"`
}

// Member is a control-plane node: an etcd member and an apiserver.
type Member struct {
	Name    string `json:"name"`
	Address string `json:"address"`
}

func nodeFile(s *site.Site, n site.Node) NodeFile {
	c := s.Cluster
	f := NodeFile{
		APIVersion: site.APIVersion, Kind: NodeFileKind,
		Name: n.Name, Role: n.Role, InstallDisk: n.InstallDisk, Labels: n.Labels, Taints: n.Taints,
		Cluster: ClusterParams{
			Name: c.Name, KubernetesVersion: c.KubernetesVersion, Domain: c.Domain,
			PodCIDR: c.PodCIDR, ServiceCIDR: c.ServiceCIDR, ClusterDNS: c.ServiceIP(10).String(),
			APIServerPort: c.APIServerPort, DiscoveryName: c.DiscoveryName,
			NodeLocalDNS: discovery.NodeLocalAddress, UpstreamDNS: c.UpstreamDNS, NTPServers: c.NTPServers,
		},
	}
	if ip := n.IP(); ip.IsValid() {
		f.Address = ip.String()
	}
	for _, m := range s.Masters() {
		f.Masters = append(f.Masters, Member{Name: m.Name, Address: m.IP().String()})
	}
	return f
}
