// Package site owns the site file: the one versioned YAML document in which
// an operator describes a whole cluster (its parameters and every node),
// its defaults, and its validation. kiln gen turns a site into the PKI and
// one Ignition config per node.
package site

import (
	"fmt"
	"math"
	"net/netip"
	"os"
	"time"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/validation"
)

// APIVersion and Kind identify a site document.
const (
	APIVersion = "kiln.dev/v1alpha1"
	Kind       = "Site"
)

// Roles a node can have: the node file's, since a site's node becomes one.
const (
	RoleGenesis = nodefile.RoleGenesis
	RoleMaster  = nodefile.RoleMaster
	RoleWorker  = nodefile.RoleWorker
)

// Site is one cluster.
type Site struct {
	APIVersion string  `json:"apiVersion"`
	Kind       string  `json:"kind"`
	Cluster    Cluster `json:"cluster"`
	Nodes      []Node  `json:"nodes"`

	// File is the path the site was read from, for messages.
	File string `json:"-"`
}

// Cluster holds the parameters every node shares.
type Cluster struct {
	Name              string       `json:"name"`
	KubernetesVersion string       `json:"kubernetesVersion"`
	Domain            string       `json:"domain,omitempty"`
	PodCIDR           string       `json:"podCIDR"`
	ServiceCIDR       string       `json:"serviceCIDR"`
	APIServerPort     int          `json:"apiServerPort,omitempty"`
	DiscoveryName     string       `json:"discoveryName,omitempty"`
	UpstreamDNS       []string     `json:"upstreamDNS,omitempty"`
	NTPServers        []string     `json:"ntpServers,omitempty"`
	SSHAuthorizedKeys []string     `json:"sshAuthorizedKeys,omitempty"`
	Certificates      Certificates `json:"certificates,omitempty"`
	// Timing is the control plane's timing profile, TimingDefault or
	// TimingSlow (docs/timing.md).
	Timing string `json:"timing,omitempty"`
	// Registries are the mirrors the nodes pull the workloads' images
	// from (docs/site.md, registries.go).
	Registries []Registry `json:"registries,omitempty"`
	// EtcdSnapshots is the masters' snapshot schedule (etcdsnapshots.go).
	EtcdSnapshots EtcdSnapshots `json:"etcdSnapshots,omitempty"`
	// RestoreFrom is the etcd snapshot the genesis node bootstraps the
	// cluster from instead of from nothing (restore.go).
	RestoreFrom *RestoreFrom `json:"restoreFrom,omitempty"`
}

// Certificates sets the lifetimes of what kiln issues, as durations
// ("8760h") or days ("365d").
type Certificates struct {
	CAValidity   string `json:"caValidity,omitempty"`
	LeafValidity string `json:"leafValidity,omitempty"`
}

// Node is one machine. UUID is its SMBIOS system UUID, in lower case
// after Load, or "" when the site names none.
type Node struct {
	Name        string            `json:"name"`
	Role        string            `json:"role"`
	MACs        []string          `json:"macs"`
	UUID        string            `json:"uuid,omitempty"`
	Network     Network           `json:"network"`
	InstallDisk string            `json:"installDisk,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Taints      []Taint           `json:"taints,omitempty"`
}

// Network is a node's primary interface: DHCP, or a static address in
// CIDR form with a gateway.
type Network struct {
	DHCP    bool   `json:"dhcp,omitempty"`
	Address string `json:"address,omitempty"`
	Gateway string `json:"gateway,omitempty"`
}

// Taint is a Kubernetes node taint.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// The timing profiles a site may name (cluster.timing): the node file
// carries the name, so the node contract owns the list.
const (
	TimingDefault = nodefile.TimingDefault
	TimingSlow    = nodefile.TimingSlow
)

// Timings lists the valid values of cluster.timing.
var Timings = nodefile.Timings

// Defaults for fields an operator may leave out.
const (
	DefaultDomain        = "cluster.local"
	DefaultAPIServerPort = 6443
	DefaultDiscoveryName = "kube-apiserver.kiln.internal"
	DefaultCAValidity    = "87600h" // 10 years
	DefaultLeafValidity  = "8760h"  // 1 year
	DefaultTiming        = TimingDefault
)

// Load reads, defaults and validates the site file at path, and reads
// the files it names (a registry mirror's CA bundle and login), relative
// to its directory. A problem in the file or in a file it names comes
// back as a *validation.List naming every field at fault.
func Load(path string) (*Site, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the site file: %w", err)
	}
	return Parse(path, data)
}

// Parse is Load on bytes already read; name is the file name in messages
// and the directory of name the base of the relative paths the site
// gives.
func Parse(name string, data []byte) (*Site, error) {
	l := &validation.List{File: name}
	s := &Site{File: name}
	if !validation.DecodeStrict(data, s, l) {
		return nil, l
	}
	s.setDefaults()
	s.validate(l)
	if err := l.Err(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Site) setDefaults() {
	c := &s.Cluster
	if c.Domain == "" {
		c.Domain = DefaultDomain
	}
	if c.APIServerPort == 0 {
		c.APIServerPort = DefaultAPIServerPort
	}
	if c.DiscoveryName == "" {
		c.DiscoveryName = DefaultDiscoveryName
	}
	if c.Certificates.CAValidity == "" {
		c.Certificates.CAValidity = DefaultCAValidity
	}
	if c.Certificates.LeafValidity == "" {
		c.Certificates.LeafValidity = DefaultLeafValidity
	}
	if c.Timing == "" {
		c.Timing = DefaultTiming
	}
	c.EtcdSnapshots.setDefaults()
}

// Masters returns the control-plane nodes (genesis first, then masters in
// file order).
func (s *Site) Masters() []Node {
	var out []Node
	for _, n := range s.Nodes {
		if n.Role == RoleGenesis {
			out = append([]Node{n}, out...)
		} else if n.Role == RoleMaster {
			out = append(out, n)
		}
	}
	return out
}

// IsMaster reports whether the node runs the control plane.
func (n Node) IsMaster() bool { return n.Role == RoleGenesis || n.Role == RoleMaster }

// IP returns the node's static address, or an invalid Addr for DHCP.
func (n Node) IP() netip.Addr {
	p, err := netip.ParsePrefix(n.Network.Address)
	if err != nil {
		return netip.Addr{}
	}
	return p.Addr()
}

// Prefix returns the node's static address with its prefix length.
func (n Node) Prefix() netip.Prefix {
	p, _ := netip.ParsePrefix(n.Network.Address)
	return p
}

// CAValidity and LeafValidity return the configured lifetimes (valid
// after Load).
func (c Cluster) CAValidity() time.Duration {
	d, _ := ParseDuration(c.Certificates.CAValidity)
	return d
}

// LeafValidity is the lifetime of every leaf certificate.
func (c Cluster) LeafValidity() time.Duration {
	d, _ := ParseDuration(c.Certificates.LeafValidity)
	return d
}

// ServiceIP returns the n-th address of the service network: 1 is the
// apiserver's "kubernetes" service, 10 the cluster DNS.
func (c Cluster) ServiceIP(n int) netip.Addr {
	p, err := netip.ParsePrefix(c.ServiceCIDR)
	if err != nil {
		return netip.Addr{}
	}
	return nthAddr(p, n)
}

// nthAddr is the n-th address after p's network address; invalid past the
// end of the address space.
func nthAddr(p netip.Prefix, n int) netip.Addr {
	a := p.Masked().Addr()
	for range n {
		a = a.Next()
	}
	return a
}

// maxDays is the longest duration in days that time.Duration holds.
const maxDays = int64(math.MaxInt64 / (24 * time.Hour))

// errTooLong is ParseDuration's error for days past what a duration
// holds, which multiplying out would wrap around.
var errTooLong = fmt.Errorf("longer than a duration can be: at most %dd (about 292 years)", maxDays)

// ParseDuration accepts Go durations and whole days ("30d").
func ParseDuration(s string) (time.Duration, error) {
	var days int64
	if n, err := fmt.Sscanf(s, "%dd", &days); err == nil && n == 1 && fmt.Sprintf("%dd", days) == s {
		if days > maxDays || days < -maxDays {
			return 0, fmt.Errorf("%s is %w", s, errTooLong)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}
