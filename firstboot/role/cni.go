package role

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/clustercheck"
	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/kilnnet"
	"github.com/kiln-project/kiln/manifests"
)

// selfReady is one poll of this node's own Ready in a node-ready phase.
// While the node is not Ready it also seeds the CNI configuration.
func (n *Node) selfReady(ctx context.Context, kube kubernetes.Interface) error {
	err := clustercheck.NodeReady(ctx, kube, n.file.Name, n.started)
	if err != nil {
		n.seedCNI(ctx, kube)
	}
	return err
}

// seedCNI writes kiln-net's conflist for the pod CIDR the
// controller-manager gave this Node when the node has no such file yet:
// the same bytes kiln-net writes, which keeps it from then on. A node is
// Ready once the runtime has a CNI configuration, and kiln-net's pod is
// only one of the node's first pods to start; on a loaded machine it
// started minutes after the CIDR existed (4 min on a QEMU master beside a
// booting worker), and no other pod is scheduled to a node that is not
// Ready. A file already there is never replaced. Failures are logged, not
// returned: kiln-net writes the file anyway.
func (n *Node) seedCNI(ctx context.Context, kube kubernetes.Interface) {
	conflist := filepath.Join(manifests.CNIConfDir, kilnnet.ConfName)
	path := n.path(conflist)
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return
	}
	node, err := kube.CoreV1().Nodes().Get(ctx, n.file.Name, metav1.GetOptions{})
	if err != nil || node.Spec.PodCIDR == "" {
		return
	}
	conf, err := kilnnet.Conflist(node.Spec.PodCIDR)
	if err == nil {
		err = atomicfile.WriteFile(path, conf, 0o644, nil)
	}
	if err != nil {
		n.Log("writing the CNI configuration for pod CIDR %s before kiln-net does: %v (kiln-net writes it when it starts)", node.Spec.PodCIDR, err)
		return
	}
	n.Log("CNI configuration %s written for pod CIDR %s (kiln-net keeps it from now on)", conflist, node.Spec.PodCIDR)
}
