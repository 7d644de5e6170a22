package manifests

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Every pod kiln runs on a master asks for CPU (none is BestEffort, whose
// class weighs 1 under contention), etcd and the apiserver ask for more
// than any add-on, etcd for more than any other pod, and together they
// fit a one-vCPU master.
func TestEveryPodAsksForCPUAndAMasterFitsOneCPU(t *testing.T) {
	p := GenesisParams(node("m1", "genesis", "192.168.10.11"), testImages)
	files := renderedFiles(t) // the same genesis node's files
	specs := podSpecs(append(AddOns(p), Anchors(p)...))
	for path := range files {
		if name, ok := strings.CutPrefix(path, StaticPodDir+"/"); ok {
			pod := renderedPod(t, files, strings.TrimSuffix(name, ".yaml"))
			specs[pod.Name] = pod.Spec
		}
	}
	if len(specs) < 10 {
		t.Fatalf("found %d pods on a master, want the static pods, the add-ons and the anchors", len(specs))
	}
	total := resource.Quantity{}
	cpu := map[string]resource.Quantity{}
	for name, spec := range specs {
		for _, c := range spec.Containers {
			q, ok := c.Resources.Requests[corev1.ResourceCPU]
			if !ok || q.IsZero() {
				t.Errorf("pod %s, container %s: no CPU request (a BestEffort pod starves beside the control plane)", name, c.Name)
				continue
			}
			cpu[name] = q
			total.Add(q)
		}
	}
	for name, q := range cpu {
		if e := cpu["etcd"]; name != "etcd" && e.Cmp(q) <= 0 {
			t.Errorf("etcd asks for %s, %s for %s: etcd, which every master waits for, should weigh most", e.String(), name, q.String())
		}
		if slices.Contains([]string{"etcd", "kube-apiserver", "kube-controller-manager"}, name) {
			continue
		}
		for _, cp := range []string{"etcd", "kube-apiserver"} {
			if c := cpu[cp]; c.Cmp(q) <= 0 {
				t.Errorf("%s asks for %s, %s for %s: the control plane should weigh more", cp, c.String(), name, q.String())
			}
		}
	}
	if total.Cmp(resource.MustParse("1")) > 0 {
		t.Errorf("a master's pods ask for %s CPU together, more than a one-vCPU node has", total.String())
	}
}
