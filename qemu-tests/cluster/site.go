package cluster

import (
	"context"
	"fmt"
	"net"
	"regexp"
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
	W1MAC  = "52:54:00:77:00:21"
	W1Addr = "10.77.0.21/24"
)

// ClusterSite is a two-master, one-worker site on the namespace's bridge:
// m1 (genesis) and m2 masters, w1 a worker in the edge pool (and with
// node-role.kubernetes.io/worker, a label its kubelet may not set); three VMs
// under TCG on 2 cores are a slow machine, so its timing is slow.
func ClusterSite() string {
	node := func(name, role, mac, addr, extra string) string {
		return fmt.Sprintf("  - {name: %s, role: %s, macs: [%q], installDisk: /dev/vda, network: {address: %s, gateway: %s}%s}\n",
			name, role, mac, addr, Gateway, extra)
	}
	return SiteHead("  timing: slow\n") + node("m1", "genesis", M1MAC, M1Addr, "") +
		node("m2", "master", M2MAC, M2Addr, "") +
		node("w1", "worker", W1MAC, W1Addr, ", labels: {kiln.dev/pool: edge, node-role.kubernetes.io/worker: \"\"}")
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

// Machine is one VM of ClusterSite as the scenario and the bench boot it.
type Machine struct {
	Name, Role, MAC string
	CPUs, MemoryMiB int
}

// Machines are ClusterSite's VMs, in the order they power on. Every one
// has a single vCPU, so the masters never hold more vCPU threads than
// the host has cores: with 2 vCPUs per master on 2 host cores under TCG,
// a guest vCPU waits for its sibling (a lock holder, a TLB shootdown)
// that the host has descheduled, and the two-member etcd stalled on
// whichever master lagged; m2's apiserver then never became healthy in
// 30 min (two runs). One vCPU each degrades in proportion instead. The
// three fit in 8 GiB.
func Machines() []Machine {
	return []Machine{
		{Name: "m1", Role: "genesis", MAC: M1MAC, CPUs: 1, MemoryMiB: 3072},
		{Name: "m2", Role: "master", MAC: M2MAC, CPUs: 1, MemoryMiB: 3072},
		{Name: "w1", Role: "worker", MAC: W1MAC, CPUs: 1, MemoryMiB: 2048},
	}
}

// KubeSystemPods is ClusterSite's count of kube-system pods: m1 and m2
// run etcd, apiserver, controller-manager, scheduler, node DNS,
// kiln-net, kube-proxy, 4 component anchors and the discovery anchor (12
// each); w1 node DNS, kiln-net, kube-proxy and the discovery anchor; one
// cluster DNS pod.
const KubeSystemPods = 12 + 12 + 4 + 1

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
