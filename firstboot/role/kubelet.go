package role

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/nodefile"
	"github.com/kiln-project/kiln/nodelabels"
)

// kubeletEnvPath holds the kubelet's per-node arguments (kubelet.service
// reads it as its EnvironmentFile).
const kubeletEnvPath = "/etc/kiln/kubelet.env"

// kubeletEnv is the kubelet's per-node arguments: its address and name,
// the site's labels a kubelet may set on itself, and the site's taints,
// registered with the Node so no pod lands before them, and the flags
// of the site's timing profile. On a restored boot the Node exists
// already, so the kubelet skips its registration (see skipRegistration).
func (n *Node) kubeletEnv() string {
	args := []string{"--node-ip=" + n.file.Address, "--hostname-override=" + n.file.Name}
	if n.skipRegistration {
		args = append(args, "--register-node=false")
	}
	labels := []string{manifests.RoleLabel + "=" + n.file.Role}
	for _, k := range slices.Sorted(maps.Keys(n.file.Labels)) {
		if nodelabels.KubeletMaySet(k) {
			labels = append(labels, k+"="+n.file.Labels[k])
		}
	}
	args = append(args, "--node-labels="+strings.Join(labels, ","))
	if len(n.file.Taints) > 0 {
		var taints []string
		for _, t := range n.file.Taints {
			taints = append(taints, fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect))
		}
		args = append(args, "--register-with-taints="+strings.Join(taints, ","))
	}
	args = append(args, manifests.TimingFor(n.file.Cluster.Timing).KubeletFlags()...)
	return "KUBELET_ARGS=" + strings.Join(args, " ") + "\n"
}

// restrictedLabels are the node file's labels a kubelet may not set.
func (n *Node) restrictedLabels() map[string]string {
	out := map[string]string{}
	for k, v := range n.file.Labels {
		if !nodelabels.KubeletMaySet(k) {
			out[k] = v
		}
	}
	return out
}

// registerIfGone is called with each failed poll of this node's Ready.
// A kubelet told to skip its registration never creates a Node that is
// missing (deleted through the API while the machine was off): when the
// apiserver says the Node is not found, the kubelet is restarted with
// its registration back on, once, and the labels a kubelet may not set
// are applied again once the new Node is Ready (reregistered).
//
// The skip exists for speed after a power cut. A registering kubelet
// retries every 7 s, and its tries block on the apiserver's port, which
// is bound about 15 s before the apiserver serves, for the 10 s TLS
// handshake timeout; restored genesis boots under TCG registered 4.9-6.6 s
// after their apiserver served. A kubelet that does not register sends
// its status at once, retrying back to back while the port is bound.
func (n *Node) registerIfGone(ctx context.Context, pollErr error) {
	if !n.skipRegistration || !apierrors.IsNotFound(pollErr) {
		return
	}
	n.skipRegistration, n.reregistered = false, true
	n.Log("node %s: no Node object in the cluster (deleted while this machine was off?): the kubelet restarts to register it", n.file.Name)
	if err := atomicfile.WriteFile(n.path(kubeletEnvPath), []byte(n.kubeletEnv()), 0o644, nil); err != nil {
		n.Log("node %s: writing %s: %v (the next poll tries again)", n.file.Name, kubeletEnvPath, err)
		n.skipRegistration, n.reregistered = true, false
		return
	}
	if _, err := n.Sys.Run(ctx, "systemctl", "restart", "--no-block", "kubelet.service"); err != nil {
		n.Log("node %s: restarting the kubelet: %v", n.file.Name, err)
	}
}

// relabel puts the node file's labels a kubelet may not set, and its
// taints, on a Node its kubelet registered again: a master labels its
// own Node, a worker asks for them as on its join.
func (n *Node) relabel(ctx context.Context) error {
	if n.file.Role == nodefile.RoleWorker {
		return n.requestLabels(ctx)
	}
	return n.labelSelf(ctx)
}
