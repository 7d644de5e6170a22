package role

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/node/kilnnet"
)

// PodCIDRRecord is the pod CIDR this node's Node was given, kept on the
// state partition. The CNI configuration is on the tmpfs /etc and gone
// after every reboot; from the record the agent writes it again before
// the kubelet starts, so a restored node is Ready at its kubelet's first
// status report instead of after its Node was read back through an
// apiserver that is itself still starting.
const PodCIDRRecord = "/var/lib/kiln/pod-cidr"

// conflistPath is kiln-net's CNI configuration file.
var conflistPath = filepath.Join(manifests.CNIConfDir, kilnnet.ConfName)

// podNetwork owns this node's pod CIDR as the agent sees it: the record
// of it on the state partition, kiln-net's CNI configuration written
// before kiln-net runs, and on a new cluster's genesis node the blocks
// it gives before any controller-manager runs.
type podNetwork struct {
	env nodeEnv
	api clients
	// wait bounds the genesis node's wait for its own pod CIDR.
	wait time.Duration
	// started is when this boot's role began: a Node heartbeat from
	// before it is a previous boot's.
	started time.Time
}

// selfReady is one poll of this node's own Ready in a node-ready phase.
// While the node is not Ready it also seeds the CNI configuration; once
// it is, it records the Node's pod CIDR for the next boot.
func (pn *podNetwork) selfReady(ctx context.Context, kube kubernetes.Interface) error {
	err := clustercheck.NodeReady(ctx, kube, pn.env.file.Name, pn.started)
	if err != nil {
		pn.seedCNI(ctx, kube)
		return err
	}
	if node, err := kube.CoreV1().Nodes().Get(ctx, pn.env.file.Name, metav1.GetOptions{}); err == nil && node.Spec.PodCIDR != "" {
		pn.recordPodCIDR(node.Spec.PodCIDR)
	}
	return nil
}

// seedCNI writes kiln-net's conflist for the pod CIDR the
// controller-manager gave this Node when the node has no such file yet:
// the same bytes kiln-net writes, which keeps it from then on. A node is
// Ready once the runtime has a CNI configuration, and kiln-net's pod is
// only one of the node's first pods to start; on a loaded machine it
// starts minutes after the CIDR exists, and no other pod is scheduled to
// a node that is not Ready. A file already there is never replaced. Failures are logged, not
// returned: kiln-net writes the file anyway.
func (pn *podNetwork) seedCNI(ctx context.Context, kube kubernetes.Interface) {
	if pn.haveConflist() {
		return // no need to read the Node
	}
	node, err := kube.CoreV1().Nodes().Get(ctx, pn.env.file.Name, metav1.GetOptions{})
	if err != nil || node.Spec.PodCIDR == "" {
		return
	}
	pn.recordPodCIDR(node.Spec.PodCIDR)
	pn.seedConflist(node.Spec.PodCIDR, "kiln-net keeps it from now on")
}

// restoreCNI writes the conflist for the recorded pod CIDR before the
// kubelet starts, on every boot after the one that learnt the CIDR. A
// Node deleted and registered again may get another CIDR: kiln-net
// rewrites the file then, and the node-ready phase the record.
func (pn *podNetwork) restoreCNI() {
	b, err := os.ReadFile(pn.env.path(PodCIDRRecord))
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	cidr := strings.TrimSpace(string(b))
	if err == nil {
		_, err = netip.ParsePrefix(cidr)
	}
	if err != nil {
		pn.env.log("the recorded pod CIDR %s: %v (the CNI configuration waits for the Node's)", PodCIDRRecord, err)
		return
	}
	pn.seedConflist(cidr, "recorded by an earlier boot")
}

// recordPodCIDR keeps cidr in PodCIDRRecord unless it is there already.
func (pn *podNetwork) recordPodCIDR(cidr string) {
	if b, err := os.ReadFile(pn.env.path(PodCIDRRecord)); err == nil && strings.TrimSpace(string(b)) == cidr {
		return
	}
	if err := atomicfile.WriteFile(pn.env.path(PodCIDRRecord), []byte(cidr+"\n"), 0o644, nil); err != nil {
		pn.env.log("recording the pod CIDR %s in %s: %v (the next boot reads it from the Node)", cidr, PodCIDRRecord, err)
	}
}

func (pn *podNetwork) haveConflist() bool {
	_, err := os.Stat(pn.env.path(conflistPath))
	return !errors.Is(err, fs.ErrNotExist)
}

// seedConflist writes kiln-net's conflist for cidr unless a file is
// there already (kiln-net's, or an operator's: never replaced); why ends
// the line that says so.
func (pn *podNetwork) seedConflist(cidr, why string) {
	if pn.haveConflist() {
		return
	}
	conf, err := kilnnet.Conflist(cidr)
	if err == nil {
		err = atomicfile.WriteFile(pn.env.path(conflistPath), conf, 0o644, nil)
	}
	if err != nil {
		pn.env.log("writing the CNI configuration for pod CIDR %s before kiln-net does: %v (kiln-net writes it when it starts)", cidr, err)
		return
	}
	pn.env.log("CNI configuration %s written for pod CIDR %s (%s)", conflistPath, cidr, why)
}

// claimPodCIDR gives a new cluster's genesis Node the first block of the
// pod network, the block the controller-manager's allocator gives the
// first Node it sees, and writes the CNI configuration for it. The node
// is then Ready without waiting for the controller-manager to elect
// itself, sync its caches and start its node IPAM controller, which on a
// slow machine is a minute or more after the apiserver: most of what a
// genesis node would wait for between its add-ons and Ready. The allocator takes a Node's pod CIDR as
// occupied when it starts, and finding it set, keeps it. When any Node has
// a pod CIDR already the allocator is at work: its choice stands, and the
// node-ready phase writes the configuration when it comes.
func (pn *podNetwork) claimPodCIDR(ctx context.Context) error {
	cluster, err := netip.ParsePrefix(pn.env.file.Cluster.PodCIDR)
	if err != nil {
		return fmt.Errorf("the cluster's pod CIDR %q: %w", pn.env.file.Cluster.PodCIDR, err)
	}
	block := netip.PrefixFrom(cluster.Masked().Addr(), nodefile.NodePodBits(cluster.Addr())).String()
	c, err := pn.api.agent(pn.env.file.Address)
	if err != nil {
		return err
	}
	return retry.Wait(ctx, "node "+pn.env.file.Name+" with a pod CIDR", pn.wait, pn.env.log, func(ctx context.Context) error {
		cidr, claimed, err := claimFirstBlock(ctx, c.kube, pn.env.file.Name, block)
		if err != nil || cidr == "" {
			return err
		}
		pn.recordPodCIDR(cidr)
		why := "given by the controller-manager"
		if claimed {
			why = "claimed: the first block, before the controller-manager allocates"
		}
		pn.seedConflist(cidr, why)
		return nil
	})
}

// givePodCIDRsFirst runs givePodCIDRs unless this node's controller-manager
// may be running already (its static pod is written: a boot that stopped
// inside the controllers phase, or any later boot), and says what it gave.
func (pn *podNetwork) givePodCIDRsFirst(ctx context.Context, kube kubernetes.Interface) error {
	if _, err := os.Stat(pn.env.path(filepath.Join(manifests.StaticPodDir, "kube-controller-manager.yaml"))); err == nil {
		return nil
	}
	podNet, err := netip.ParsePrefix(pn.env.file.Cluster.PodCIDR)
	if err != nil {
		return err
	}
	given, err := givePodCIDRs(ctx, kube, podNet)
	for _, name := range slices.Sorted(maps.Keys(given)) {
		pn.env.log("pod CIDR %s given to node %s, registered before the controller-manager runs (its allocator takes it as occupied)", given[name], name)
	}
	return err
}

// claimFirstBlock sets block as name's pod CIDR when no Node has one, and
// returns the pod CIDR name has then and whether it was this call that
// set it; "" when another Node has one and name not yet (the allocator
// is at work).
func claimFirstBlock(ctx context.Context, kube kubernetes.Interface, name, block string) (cidr string, claimed bool, err error) {
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", false, err
	}
	self := findNode(nodes.Items, name)
	if self == nil {
		return "", false, fmt.Errorf("node %s is not registered yet", name)
	}
	if slices.ContainsFunc(nodes.Items, func(nd corev1.Node) bool { return nd.Spec.PodCIDR != "" }) {
		return self.Spec.PodCIDR, false, nil
	}
	// A pod CIDR set meanwhile makes this invalid (it is immutable once
	// set); the next poll reads it.
	got, err := setPodCIDR(ctx, kube, name, block)
	if err != nil {
		return "", false, fmt.Errorf("claiming pod CIDR %s for node %s: %w", block, name, err)
	}
	return got.Spec.PodCIDR, true, nil
}

// setPodCIDR sets a Node's pod CIDR (spec.podCIDR and podCIDRs), as the
// controller-manager's allocator would.
func setPodCIDR(ctx context.Context, kube kubernetes.Interface, name, block string) (*corev1.Node, error) {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"podCIDR": block, "podCIDRs": []string{block}}})
	if err != nil {
		return nil, err
	}
	return kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: manifests.FieldOwner})
}

func findNode(nodes []corev1.Node, name string) *corev1.Node {
	for i := range nodes {
		if nodes[i].Name == name {
			return &nodes[i]
		}
	}
	return nil
}

// givePodCIDRs gives every Node registered without a pod CIDR the lowest
// block of the pod network no Node has, when no controller-manager has run
// in the cluster yet: a new cluster's genesis node does it just before it
// starts its controller-manager. The allocator lists the Nodes when it
// starts and takes their blocks as occupied, so a block given here is
// never given twice. Without it, a joining master and a worker that
// registered while the genesis node started would wait for the
// controller-manager to elect itself, sync and allocate (tens of seconds
// on a slow machine), and be Ready only then. It returns what it gave, by Node.
func givePodCIDRs(ctx context.Context, kube kubernetes.Interface, cluster netip.Prefix) (map[string]string, error) {
	if _, err := kube.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, controllerManagerLease, metav1.GetOptions{}); err == nil {
		return nil, nil // a controller-manager has run: the allocator's choice stands
	} else if !apierrors.IsNotFound(err) {
		return nil, err
	}
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, nd := range nodes.Items {
		for _, c := range nd.Spec.PodCIDRs {
			used[c] = true
		}
		used[nd.Spec.PodCIDR] = true
	}
	bits := nodefile.NodePodBits(cluster.Addr())
	given := map[string]string{}
	next := 0
	for _, nd := range nodes.Items {
		if nd.Spec.PodCIDR != "" {
			continue
		}
		var block string
		for ; block == "" || used[block]; next++ {
			b, ok := nthBlock(cluster, bits, next)
			if !ok {
				return given, fmt.Errorf("the pod network %s has no free /%d block for node %s", cluster, bits, nd.Name)
			}
			block = b.String()
		}
		if _, err := setPodCIDR(ctx, kube, nd.Name, block); err != nil {
			return given, fmt.Errorf("giving pod CIDR %s to node %s: %w", block, nd.Name, err)
		}
		used[block], given[nd.Name] = true, block
	}
	return given, nil
}

// controllerManagerLease is the leader-election lease every
// kube-controller-manager of the cluster takes before its controllers run.
const controllerManagerLease = "kube-controller-manager"

// nthBlock is the i-th /bits block of cluster, false past its end.
func nthBlock(cluster netip.Prefix, bits, i int) (netip.Prefix, bool) {
	size := cluster.Addr().BitLen()
	if i < 0 || bits < cluster.Bits() || bits > size || bits-cluster.Bits() < 63 && i >= 1<<(bits-cluster.Bits()) {
		return netip.Prefix{}, false
	}
	a := cluster.Masked().Addr().As16()
	v := new(big.Int).SetBytes(a[:])
	v.Add(v, new(big.Int).Lsh(big.NewInt(int64(i)), uint(size-bits)))
	var out [16]byte
	v.FillBytes(out[:])
	addr := netip.AddrFrom16(out)
	if cluster.Addr().Is4() {
		addr = addr.Unmap()
	}
	return netip.PrefixFrom(addr, bits), true
}
