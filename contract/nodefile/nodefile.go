// Package nodefile owns /etc/kiln/node.json, the contract between kiln gen
// and the node agent: the node's role and the cluster parameters its
// components are configured from. It imports nothing from kiln, so every
// side of the contract (gen, the agent, the roles, the manifests) can.
package nodefile

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
)

// Where kiln gen's files land on a node: this file, the node's PKI files
// and its kubeconfigs. The agent and the manifests read them there.
const (
	Dir           = "/etc/kiln"
	Path          = Dir + "/node.json"
	PKIDir        = "/etc/kiln/pki"
	KubeconfigDir = "/etc/kiln/kubeconfig"
	// ZonePath is the seed discovery zone, which the role copies to the
	// node-local CoreDNS.
	ZonePath = "/etc/kiln/discovery.zone"
	// AgentKubeconfig is a master's own credential, which the agent
	// installs the add-ons and labels the master with (system:masters).
	// It is not the operator's admin.kubeconfig.
	AgentKubeconfig = KubeconfigDir + "/agent.conf"
	// APIServerConfigDir holds the apiserver's configuration files.
	APIServerConfigDir = "/etc/kiln/apiserver"
	// EncryptionConfigPath is the apiserver's encryption configuration,
	// which holds the key Secrets are encrypted in etcd with.
	EncryptionConfigPath = APIServerConfigDir + "/encryption-config.yaml"
)

// KilnBinary is where every node image carries the static kiln binary:
// the agent, and the program the pods of the kiln image run (they mount
// it from the node, so each node runs the kiln it was imaged with).
const KilnBinary = "/usr/bin/kiln"

// A node's departure: kiln node remove marks the Node with
// RemovedAnnotation once its etcd member (if any) is gone; the node's
// kiln-leave service then records RemovedStamp on the state partition,
// stops the kubelet and every pod, and answers with LeftAnnotation. A
// node with the stamp stays out on every later boot, until it is
// re-imaged with a blank state disk.
const (
	RemovedAnnotation = "kiln.dev/removed"
	LeftAnnotation    = "kiln.dev/left"
	RemovedStamp      = "/var/lib/kiln/removed"
)

// VersionAnnotation is the version of kiln (agent and image) a node
// runs, which its role publishes on its Node every boot for kiln node
// list.
const VersionAnnotation = "kiln.dev/version"

// What a node publishes on its Node for a rolling upgrade (kiln
// upgrade), as its kubelet: the digest with the version on every boot,
// the boot ID as the role's last phase.
const (
	// KilnDigestAnnotation is the sha256 (hex) of the node's own kiln
	// binary (KilnBinary): the digest node.manifest.json lists for it, by
	// which kiln upgrade knows a node already runs the target image.
	KilnDigestAnnotation = "kiln.dev/kiln-sha256"
	// RoleDoneAnnotation is the boot ID (/proc/sys/kernel/random/boot_id)
	// of the boot whose role finished, written once the role is done:
	// the health gate reads it as "the role is done on this boot".
	RoleDoneAnnotation = "kiln.dev/role-done"
)

// StampDir holds the role's one-shot steps' stamps, on the state
// partition: <role>/<phase>, e.g. master/label once the master label is
// on the Node.
const StampDir = "/var/lib/kiln/stamps"

// ClusterAdminsGroup is the group of the operator's admin credential,
// bound to the cluster-admin role by an add-on (as kubeadm binds
// kubeadm:cluster-admins): RBAC can take it away, unlike system:masters.
const ClusterAdminsGroup = "kiln:cluster-admins"

// APIVersion and Kind identify the document.
const (
	APIVersion = "kiln.dev/v1alpha1"
	Kind       = "Node"
)

// Roles a node can have.
const (
	RoleGenesis = "genesis"
	RoleMaster  = "master"
	RoleWorker  = "worker"
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
	Taints      []Taint           `json:"taints,omitempty"`
	Cluster     ClusterParams     `json:"cluster"`
	Masters     []Member          `json:"masters"`
	// WorkerLabels are, in a master's node file, the labels the site
	// gives each of its workers that a kubelet may not set on itself,
	// by worker name (a worker without such labels has an empty set).
	// The master's anchor applies a label a worker requests only when
	// it is here, with the same value: a request is the worker's own
	// claim, this is the site's word.
	WorkerLabels map[string]map[string]string `json:"workerLabels,omitempty"`
	// SiteNodes are, in a master's node file, every node of the site by
	// name with its static address ("" for a DHCP node): what the
	// master's anchor checks a kubelet's serving certificate request
	// against.
	SiteNodes map[string]string `json:"siteNodes,omitempty"`
	// EtcdSnapshots is, in a master's node file, the schedule of its
	// etcd snapshots; nil when the site turns them off.
	EtcdSnapshots *EtcdSnapshots `json:"etcdSnapshots,omitempty"`
	// Restore is, in a genesis node file, the etcd snapshot the node
	// bootstraps its cluster from instead of from nothing.
	Restore *Restore `json:"restore,omitempty"`
	// FallbackConfigs are the hashes (sha512-<hex>) of the configs kiln
	// gen rendered for this node before this one, newest first: the
	// configs the node may go back to when this one fails to apply on
	// it. The node takes the list only from the config it is applying,
	// never from its state partition.
	FallbackConfigs []string `json:"fallbackConfigs,omitempty"`
}

// EtcdSnapshots is a master's schedule of snapshots of its own etcd
// member, from the site's cluster.etcdSnapshots.
type EtcdSnapshots struct {
	// Every is the interval, as Go formats a duration ("1h0m0s").
	Every string `json:"every"`
	// Keep is how many of the newest snapshots stay.
	Keep int `json:"keep"`
}

// Restore names the snapshot a genesis node restores etcd from: the
// file its config writes (contract/etcdsnapshot.Path) and that file's
// SHA-256, which the node checks again before it restores.
type Restore struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	// AllowUnknownCluster restores a snapshot that names no cluster (one
	// taken before kiln recorded the cluster's identity in it).
	AllowUnknownCluster bool `json:"allowUnknownCluster,omitempty"`
}

// MaxFallbackConfigs is how many earlier configs kiln gen keeps in
// FallbackConfigs.
const MaxFallbackConfigs = 2

// ServingCertByCSR reports whether the node's kubelet asks the cluster
// for its serving certificate: a DHCP node's address is not known when
// kiln gen issues certificates, and the apiserver checks every kubelet's
// certificate against the address it dials.
func (f NodeFile) ServingCertByCSR() bool { return f.Address == "" }

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
	// Timing is the site's timing profile (Timings); empty in node
	// files written before it existed, which means the default.
	Timing string `json:"timing,omitempty"`
}

// Taint is a Kubernetes node taint.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// Member is a control-plane node: an etcd member and an apiserver.
type Member struct {
	Name    string `json:"name"`
	Address string `json:"address"`
}

// Read loads and checks a node file.
func Read(path string) (*NodeFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the node file: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Parse decodes and checks a node file's contents.
func Parse(data []byte) (*NodeFile, error) {
	var f NodeFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	if f.APIVersion != APIVersion || f.Kind != Kind {
		return nil, fmt.Errorf("apiVersion/kind %s/%s, want %s/%s", f.APIVersion, f.Kind, APIVersion, Kind)
	}
	if f.Name == "" || f.Role == "" {
		return nil, fmt.Errorf("name and role are required")
	}
	return &f, nil
}

// IdentityChanges lists what from was and to is of the node's identity,
// the fields a config change may not change on a node that runs
// ("role: worker -> master"), in a fixed order; nil when they agree.
// The role is compared as it is written: a genesis node's file says
// genesis on every boot, also once it has come back as a master.
func IdentityChanges(from, to *NodeFile) []string {
	var out []string
	for _, f := range []struct{ path, from, to string }{
		{"name", from.Name, to.Name},
		{"role", from.Role, to.Role},
		{"address", from.Address, to.Address},
		{"cluster.name", from.Cluster.Name, to.Cluster.Name},
	} {
		if f.from != f.to {
			out = append(out, fmt.Sprintf("%s: %s -> %s", f.path, orNone(f.from), orNone(f.to)))
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// ControlPlaneLabels mark a Node as a master, which draws the control
// plane's DaemonSets to it: only a master's own join sets them.
var ControlPlaneLabels = []string{"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"}

// RefusedWorkerLabel says why a worker may not carry the label key, "" when
// it may. A worker's labels that its kubelet may not set reach its Node at
// its own request (package nodelabels), so kiln gen refuses, and a master
// never applies, those that would let a node's claim draw the control
// plane or isolated workloads to it.
func RefusedWorkerLabel(key string) string {
	switch {
	case slices.Contains(ControlPlaneLabels, key):
		return "marks the control plane, which only a master's own join sets"
	case strings.HasPrefix(key, "node-restriction.kubernetes.io/"):
		return "node-restriction.kubernetes.io/ labels mark isolation and are an administrator's to set with kubectl label, never a node's own request"
	}
	return ""
}

// Timing profiles: how patient the control plane is with its own
// members. Every master renders the same profile, so etcd's heartbeat
// and election timeout match across members.
const (
	TimingDefault = "default" // Kubernetes' and etcd's own defaults
	TimingSlow    = "slow"    // loaded, small or emulated machines: slower failover, no restarts of slow starts
)

// Timings lists the valid values of Cluster.Timing.
var Timings = []string{TimingDefault, TimingSlow}

// NodePodBits is the prefix length of the block of pod addresses the
// controller-manager gives each node: its default for the family, as kiln
// does not set --node-cidr-mask-size.
func NodePodBits(a netip.Addr) int {
	if a.Is4() {
		return 24
	}
	return 64
}
