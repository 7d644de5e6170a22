package role

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kiln-project/kiln/contract/nodelabels"
	"github.com/kiln-project/kiln/manifests"
)

// kubeletEnv is the kubelet's per-node arguments: its address and name,
// the site's labels a kubelet may set on itself, and the site's taints,
// registered with the Node so no pod lands before them, and the flags
// of the site's timing profile.
func (n *Node) kubeletEnv() string {
	args := []string{"--node-ip=" + n.file.Address, "--hostname-override=" + n.file.Name}
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
