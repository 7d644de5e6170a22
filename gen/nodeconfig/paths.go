// Package nodeconfig turns a site and its PKI into one Ignition config per
// node: hostname, networkd files, SSH keys, the node's certificates and
// kubeconfigs (only what its role needs), the seed discovery zone and the
// kiln node file that tells the agent its role. Generate writes them all
// or nothing.
package nodeconfig

import (
	"github.com/kiln-project/kiln/contract/discovery"
	"github.com/kiln-project/kiln/contract/layout"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/nodelabels"
	"github.com/kiln-project/kiln/gen/site"
)

// Paths on the node, as docs/architecture.md fixes them.
const (
	NodeFilePath  = nodefile.Path
	PKIDir        = nodefile.PKIDir
	KubeconfigDir = nodefile.KubeconfigDir
	ZonePath      = nodefile.ZonePath
	// EncryptionConfigPath holds the Secrets encryption key: masters only.
	EncryptionConfigPath = nodefile.EncryptionConfigPath
	NetworkPath          = "/etc/systemd/network/10-kiln.network"
	HostnamePath         = "/etc/hostname"
	IgnitionSpec         = "3.5.0"
	StatePartLabel       = layout.StatePartLabel
)

func nodeFile(s *site.Site, n site.Node) nodefile.NodeFile {
	c := s.Cluster
	f := nodefile.NodeFile{
		APIVersion: nodefile.APIVersion, Kind: nodefile.Kind,
		Name: n.Name, Role: n.Role, InstallDisk: n.InstallDisk, Labels: n.Labels, Taints: taints(n.Taints),
		Cluster: nodefile.ClusterParams{
			Name: c.Name, KubernetesVersion: c.KubernetesVersion, Domain: c.Domain,
			PodCIDR: c.PodCIDR, ServiceCIDR: c.ServiceCIDR, ClusterDNS: c.ServiceIP(10).String(),
			APIServerPort: c.APIServerPort, DiscoveryName: c.DiscoveryName,
			NodeLocalDNS: discovery.NodeLocalAddress, UpstreamDNS: c.UpstreamDNS, NTPServers: c.NTPServers,
			Timing: c.Timing,
		},
	}
	if ip := n.IP(); ip.IsValid() {
		f.Address = ip.String()
	}
	for _, m := range s.Masters() {
		f.Masters = append(f.Masters, nodefile.Member{Name: m.Name, Address: m.IP().String()})
	}
	if n.IsMaster() {
		f.WorkerLabels = workerLabels(s)
		f.SiteNodes = siteNodes(s)
		f.EtcdSnapshots = c.EtcdSnapshots.Schedule()
	}
	f.Restore = restoreOf(s, n)
	return f
}

// workerLabels are, for a master's node file, the labels the site gives
// each worker that its kubelet may not set itself: what the master's
// anchor may apply at the worker's request, and nothing else.
func workerLabels(s *site.Site) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, n := range s.Nodes {
		if n.Role != site.RoleWorker {
			continue
		}
		labels := map[string]string{}
		for k, v := range n.Labels {
			if !nodelabels.KubeletMaySet(k) {
				labels[k] = v
			}
		}
		out[n.Name] = labels
	}
	return out
}

// siteNodes are, for a master's node file, every node's static address
// by name ("" for a DHCP node).
func siteNodes(s *site.Site) map[string]string {
	out := map[string]string{}
	for _, n := range s.Nodes {
		out[n.Name] = ""
		if ip := n.IP(); ip.IsValid() {
			out[n.Name] = ip.String()
		}
	}
	return out
}

func taints(in []site.Taint) []nodefile.Taint {
	var out []nodefile.Taint
	for _, t := range in {
		out = append(out, nodefile.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	return out
}
