package manifests

import (
	"maps"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

func anchorSets(t *testing.T) map[string]*appsv1.DaemonSet {
	t.Helper()
	p := GenesisParams(node("m1", "genesis", "192.168.10.11"), testImages)
	out := map[string]*appsv1.DaemonSet{}
	for _, o := range Anchors(p) {
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			out[ds.Name] = ds
		}
	}
	if len(out) != 2 {
		t.Fatalf("anchor DaemonSets: %v, want %s and %s", slices.Sorted(maps.Keys(out)), MastersAnchor, OthersAnchor)
	}
	return out
}

// runsOn reports whether the DaemonSet's pod lands on a node with labels.
func runsOn(ds *appsv1.DaemonSet, labels map[string]string) bool {
	spec := ds.Spec.Template.Spec
	for k, v := range spec.NodeSelector {
		if have, ok := labels[k]; !ok || have != v {
			return false
		}
	}
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil {
		return true
	}
	for _, term := range spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		ok := true
		for _, r := range term.MatchExpressions {
			_, has := labels[r.Key]
			switch r.Operator {
			case corev1.NodeSelectorOpDoesNotExist:
				ok = ok && !has
			case corev1.NodeSelectorOpExists:
				ok = ok && has
			default:
				panic("runsOn: operator " + string(r.Operator))
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// Every node runs exactly one anchor pod, and it keeps the zone; a
// master's is the one pod that keeps every control-plane component.
func TestOneAnchorPodPerNode(t *testing.T) {
	sets := anchorSets(t)
	for _, tc := range []struct {
		node   string
		labels map[string]string
		want   string
	}{
		{"master", map[string]string{MasterLabel: "", RoleLabel: "master"}, MastersAnchor},
		{"worker", map[string]string{RoleLabel: "worker"}, OthersAnchor},
		{"unlabelled (a joining master before its label)", map[string]string{}, OthersAnchor},
	} {
		t.Run(tc.node, func(t *testing.T) {
			var on []string
			for name, ds := range sets {
				if runsOn(ds, tc.labels) {
					on = append(on, name)
				}
			}
			if !slices.Equal(on, []string{tc.want}) {
				t.Fatalf("anchors on the node: %v, want [%s]", on, tc.want)
			}
			cmd := sets[tc.want].Spec.Template.Spec.Containers[0].Command
			if !slices.Contains(cmd, DiscoveryAnchor) {
				t.Errorf("%s does not keep the zone: %v", tc.want, cmd)
			}
		})
	}
	cmd := sets[MastersAnchor].Spec.Template.Spec.Containers[0].Command
	for _, c := range AnchoredComponents {
		if !slices.Contains(cmd, c) {
			t.Errorf("%s does not keep %s: %v", MastersAnchor, c, cmd)
		}
	}
}

// The masters' anchor's cleanup names every component with etcd last
// among the static pods: etcd's cleanup waits for the member's removal,
// and the others must not wait behind it.
func TestMastersAnchorCleansUpEtcdLast(t *testing.T) {
	c := anchorSets(t)[MastersAnchor].Spec.Template.Spec.Containers[0]
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
		t.Fatal("no preStop hook")
	}
	var order []string
	hook := c.Lifecycle.PreStop.Exec.Command
	for i, a := range hook {
		if a == "--component" && i+1 < len(hook) && hook[i+1] != DiscoveryAnchor {
			order = append(order, hook[i+1])
		}
	}
	if len(order) != len(AnchoredComponents) || order[len(order)-1] != "etcd" {
		t.Errorf("preStop cleans up %v, want all of %v with etcd last", order, AnchoredComponents)
	}
	if !slices.Contains(hook, "--cleanup") {
		t.Errorf("preStop %v has no --cleanup", hook)
	}
}
