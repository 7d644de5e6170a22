package role

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kiln-project/kiln/manifests"
)

// kubeletEnv is the kubelet's per-node arguments: its address and name,
// the site's labels a kubelet may set on itself, and the site's taints,
// registered with the Node so no pod lands before them.
func (n *Node) kubeletEnv() string {
	args := []string{"--node-ip=" + n.file.Address, "--hostname-override=" + n.file.Name}
	labels := []string{manifests.RoleLabel + "=" + n.file.Role}
	for _, k := range slices.Sorted(maps.Keys(n.file.Labels)) {
		if kubeletMaySet(k) {
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
	return "KUBELET_ARGS=" + strings.Join(args, " ") + "\n"
}

// kubeletMaySet reports whether a kubelet may set the label on its own
// Node: NodeRestriction refuses keys in the kubernetes.io and k8s.io
// namespaces (node-role.kubernetes.io/...) except the kubelet's and
// node's own; a master applies those through the API.
func kubeletMaySet(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	if !ok {
		return true
	}
	for _, allowed := range []string{"kubelet.kubernetes.io", "node.kubernetes.io"} {
		if prefix == allowed || strings.HasSuffix(prefix, "."+allowed) {
			return true
		}
	}
	for _, restricted := range []string{"kubernetes.io", "k8s.io"} {
		if prefix == restricted || strings.HasSuffix(prefix, "."+restricted) {
			return false
		}
	}
	return true
}

// restrictedLabels are the node file's labels a kubelet may not set.
func (n *Node) restrictedLabels() map[string]string {
	out := map[string]string{}
	for k, v := range n.file.Labels {
		if !kubeletMaySet(k) {
			out[k] = v
		}
	}
	return out
}
