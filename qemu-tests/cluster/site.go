package cluster

import (
	"context"
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kiln-project/kiln/qemu-tests/vm"
)

// The three-node site on a bridge in a network namespace (package netns):
// the bridge carries the gateway address, each node a tap on it.
const (
	BridgeCIDR = "10.77.0.1/24"
	Gateway    = "10.77.0.1"

	M1MAC  = "52:54:00:77:00:11"
	M1Addr = "10.77.0.11/24"
	M2MAC  = "52:54:00:77:00:12"
	M2Addr = "10.77.0.12/24"
	M3MAC  = "52:54:00:77:00:13"
	M3Addr = "10.77.0.13/24"
	W1MAC  = "52:54:00:77:00:21"
	W1Addr = "10.77.0.21/24"
)

// Topology is a cluster scenario's site on the namespace's bridge: its
// machines, in the order they power on, and the registry mirrors every
// node is given. Under TCG on 2 cores it is a slow machine, so its timing
// is slow.
type Topology struct {
	Machines []Machine
	Mirrors  []Mirror
}

// Mirror is a registry mirror of a Topology's site (cluster.registries):
// the nodes pull Upstream's images from URL, whose certificate the CA in
// CAFile (an absolute path: the site is parsed from anywhere) signs.
type Mirror struct {
	Upstream, URL, CAFile string
}

// ThreeNodes is m1 (genesis) and m2 masters and w1 a worker, all three
// powered on together, as a rack comes up: make cluster-test with
// CLUSTER_TESTS=TestClusterJoinsAndSurvivesPowerCut, make soak, and the
// cluster part of make bench. One
// vCPU each: with 2 vCPUs per master on 2 host cores under TCG a guest
// vCPU waited for a sibling the host had descheduled and the two-member
// etcd stalled. Even so two masters need more than 2 host cores (a
// settled master alone keeps 0.9 vCPU busy, docs/cluster.md).
func ThreeNodes() Topology {
	return Topology{Machines: []Machine{
		{Name: "m1", Role: "genesis", MAC: M1MAC, Addr: M1Addr, CPUs: 1, MemoryMiB: 3072},
		{Name: "m2", Role: "master", MAC: M2MAC, Addr: M2Addr, CPUs: 1, MemoryMiB: 3072},
		{Name: "w1", Role: "worker", MAC: W1MAC, Addr: W1Addr, CPUs: 1, MemoryMiB: 2048, Labels: w1Labels},
	}}
}

// ThreeMastersAndWorker is make soak's lifecycle site: m1 (genesis) and
// m2 powered on together, m3 once m2 has joined, w1 once m3 has (make
// soak holds w1 back and powers it on once m3 is gone); w1 has a
// master's memory, as it takes the master role from m2 later.
func ThreeMastersAndWorker() Topology {
	tp := ThreeNodes()
	m3 := Machine{Name: "m3", Role: "master", MAC: M3MAC, Addr: M3Addr, CPUs: 1, MemoryMiB: 3072, After: "m2"}
	w1 := tp.Machines[2]
	w1.After, w1.MemoryMiB = "m3", 3072
	tp.Machines = []Machine{tp.Machines[0], tp.Machines[1], m3, w1}
	return tp
}

// WithRole is the topology with machine name given role (and without the
// machines in drop): the site kiln gen runs again when a machine takes
// another role or leaves.
func (tp Topology) WithRole(name, role string, drop ...string) Topology {
	out := Topology{Mirrors: tp.Mirrors}
	for _, m := range tp.Machines {
		if slices.Contains(drop, m.Name) {
			continue
		}
		if m.Name == name {
			m.Role = role
			m.DHCP = m.DHCP && role == "worker" // a master needs a static address
		}
		out.Machines = append(out.Machines, m)
	}
	return out
}

// WithDHCP is the topology with the named workers taking their
// addresses from the segment's DHCP server (which must give each its
// Addr) instead of the site.
func (tp Topology) WithDHCP(names ...string) Topology {
	out := Topology{Mirrors: tp.Mirrors}
	for _, m := range tp.Machines {
		m.DHCP = m.DHCP || (slices.Contains(names, m.Name) && m.Role == "worker")
		out.Machines = append(out.Machines, m)
	}
	return out
}

// Without is the topology without the named machines: the site as it
// stands while they are off or gone.
func (tp Topology) Without(names ...string) Topology { return tp.WithRole("", "", names...) }

// TwoMasters is m1 (genesis) and m2 (master) powered on together, as in
// ThreeNodes, without a worker: the removal of a master through the API.
func TwoMasters() Topology {
	tp := ThreeNodes()
	tp.Machines = tp.Machines[:2]
	return tp
}

// TwoNodes is m1 (genesis, 2 vCPUs) and w1 (worker), w1 powered on once
// m1 is done: make test's cluster scenario, and part of make soak.
// Booted side by side, the three vCPU threads on two cores slowed both
// more than booting them one after the other: powered on together, m1's
// agent started at 141 s instead of 50 s and it was done at 801 s; with
// w1 powered on at m1's apiserver healthy, m1's pods (cluster DNS among
// them) took minutes to start beside w1's image import and m1 was done at
// 886 s; alone, a genesis node is done at about 365 s.
func TwoNodes() Topology {
	return Topology{Machines: []Machine{
		{Name: "m1", Role: "genesis", MAC: M1MAC, Addr: M1Addr, CPUs: 2, MemoryMiB: 3072},
		{Name: "w1", Role: "worker", MAC: W1MAC, Addr: W1Addr, CPUs: 1, MemoryMiB: 2048, Labels: w1Labels, After: "m1"},
	}}
}

// w1Labels: w1 is in the edge pool and has node-role.kubernetes.io/worker,
// a label its kubelet may not set.
var w1Labels = map[string]string{"kiln.dev/pool": "edge", "node-role.kubernetes.io/worker": ""}

// Site is the topology's site file.
func (tp Topology) Site() string {
	extra := "  timing: slow\n"
	if len(tp.Mirrors) > 0 {
		extra += "  registries:\n"
	}
	for _, m := range tp.Mirrors {
		extra += fmt.Sprintf("    - {upstream: %s, mirrors: [{url: %q, caFile: %q}]}\n", m.Upstream, m.URL, m.CAFile)
	}
	s := SiteHead(extra)
	for _, m := range tp.Machines {
		extra := ""
		if len(m.Labels) > 0 {
			keys := slices.Sorted(maps.Keys(m.Labels))
			var kv []string
			for _, k := range keys {
				kv = append(kv, fmt.Sprintf("%s: %q", k, m.Labels[k]))
			}
			extra = ", labels: {" + strings.Join(kv, ", ") + "}"
		}
		network := fmt.Sprintf("{address: %s, gateway: %s}", m.Addr, Gateway)
		if m.DHCP {
			network = "{dhcp: true}"
		}
		s += fmt.Sprintf("  - {name: %s, role: %s, macs: [%q], installDisk: /dev/vda, network: %s%s}\n",
			m.Name, m.Role, m.MAC, network, extra)
	}
	return s
}

// Masters are the topology's genesis and master machines.
func (tp Topology) Masters() []Machine {
	var out []Machine
	for _, m := range tp.Machines {
		if m.Role != "worker" {
			out = append(out, m)
		}
	}
	return out
}

// MasterIPs are the masters' addresses, in the topology's order.
func (tp Topology) MasterIPs() []string {
	var out []string
	for _, m := range tp.Masters() {
		out = append(out, m.IP())
	}
	return out
}

// HasWorker reports whether the named machine is in the topology as a
// worker.
func (tp Topology) HasWorker(name string) bool {
	return slices.ContainsFunc(tp.Machines, func(m Machine) bool { return m.Name == name && m.Role == "worker" })
}

// Names are the machines' names, sorted: what kubectl get nodes lists.
func (tp Topology) Names() []string {
	var out []string
	for _, m := range tp.Machines {
		out = append(out, m.Name)
	}
	slices.Sort(out)
	return out
}

// KubeSystemPods is the count of kube-system pods the topology runs:
// each master etcd, apiserver, controller-manager, scheduler, node DNS,
// kiln-net, kube-proxy and the masters' anchor (8); each worker node DNS,
// kiln-net, kube-proxy and the discovery anchor (4); one cluster DNS pod.
func (tp Topology) KubeSystemPods() int {
	masters := len(tp.Masters())
	return 8*masters + 4*(len(tp.Machines)-masters) + 1
}

// NetnsClient is a client with an admin kubeconfig used as written: its
// server (the site's discovery name) and certificates unchanged, every
// connection made by dial, such as a netns.Net's DialContext (which then
// needs the discovery name given to its AddHost). contextName "" is the
// kubeconfig's current context.
func NetnsClient(adminKubeconfig []byte, contextName string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (kubernetes.Interface, *rest.Config, error) {
	kc, err := clientcmd.Load(adminKubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	rc, err := clientcmd.NewNonInteractiveClientConfig(*kc, contextName, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("admin kubeconfig, context %q: %w", contextName, err)
	}
	rc.Dial = dial
	rc.Timeout = 20 * time.Second
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("admin kubeconfig, context %q: %w", contextName, err)
	}
	return kube, rc, nil
}

// Machine is one VM of a Topology.
type Machine struct {
	Name, Role, MAC string
	Addr            string // its address on the bridge, with the prefix length
	// DHCP leaves the address out of the site: the machine gets Addr
	// from the segment's DHCP server, and its kubelet asks the cluster
	// for its serving certificate.
	DHCP            bool
	CPUs, MemoryMiB int
	After           string            // the machine whose role must be done before this one powers on; "" powers on first
	Labels          map[string]string // its site labels
}

// IP is the machine's address without the prefix length.
func (m Machine) IP() string { return strings.Split(m.Addr, "/")[0] }

// WaitRoleDone waits within bound for the VM's role to end on its
// console and fails unless the line says role and how (bootstrapped,
// joined, restored); it returns the line.
func WaitRoleDone(ctx context.Context, v *vm.VM, role, how string, bound time.Duration) (string, error) {
	want := "kiln-firstboot: done role=" + role
	line, err := v.WaitLine(ctx, regexp.MustCompile(regexp.QuoteMeta(want)+`|kiln-firstboot: error`), bound)
	if err == nil && !strings.Contains(line, want+" ("+how) {
		err = fmt.Errorf("the console says %q", line)
	}
	if err != nil {
		return line, fmt.Errorf("%s: waiting for `%s (%s`: %w", v.Name, want, how, err)
	}
	return line, nil
}
