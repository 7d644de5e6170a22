package role

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/nodelabels"
	"github.com/kiln-project/kiln/manifests"
)

// kubeletEnv is, from the node file, the kubelet's per-node arguments: its address and name,
// the site's labels a kubelet may set on itself, and the site's taints,
// registered with the Node so no pod lands before them, and the flags
// of the site's timing profile.
func kubeletEnv(f *nodefile.NodeFile) string {
	args := []string{"--node-ip=" + f.Address, "--hostname-override=" + f.Name}
	labels := []string{manifests.RoleLabel + "=" + f.Role}
	for _, k := range slices.Sorted(maps.Keys(f.Labels)) {
		if nodelabels.KubeletMaySet(k) {
			labels = append(labels, k+"="+f.Labels[k])
		}
	}
	args = append(args, "--node-labels="+strings.Join(labels, ","))
	if len(f.Taints) > 0 {
		var taints []string
		for _, t := range f.Taints {
			taints = append(taints, fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect))
		}
		args = append(args, "--register-with-taints="+strings.Join(taints, ","))
	}
	args = append(args, manifests.TimingFor(f.Cluster.Timing).KubeletFlags()...)
	return "KUBELET_ARGS=" + strings.Join(args, " ") + "\n"
}

// restrictedLabels are the node file's labels a kubelet may not set.
func restrictedLabels(f *nodefile.NodeFile) map[string]string {
	out := map[string]string{}
	for k, v := range f.Labels {
		if !nodelabels.KubeletMaySet(k) {
			out[k] = v
		}
	}
	return out
}
