package manifests

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// Every pod kiln runs on a master asks for CPU (none is BestEffort, whose
// class weighs 1 under contention), etcd and the apiserver ask for more
// than any add-on, and together they fit a one-vCPU master.
func TestEveryPodAsksForCPUAndAMasterFitsOneCPU(t *testing.T) {
	p := GenesisParams(node("m1", "genesis", "192.168.10.11"), testImages)
	files, err := Files(p)
	if err != nil {
		t.Fatal(err)
	}
	specs := map[string]corev1.PodSpec{}
	for _, f := range files {
		if _, ok := strings.CutPrefix(f.Path, StaticPodDir+"/"); ok {
			var pod corev1.Pod
			if err := yaml.UnmarshalStrict(f.Content, &pod); err != nil {
				t.Fatalf("%s: %v", f.Path, err)
			}
			specs[pod.Name] = pod.Spec
		}
	}
	for _, obj := range append(AddOns(p), Anchors(p)...) {
		switch o := obj.(type) {
		case *appsv1.DaemonSet:
			specs[o.Name] = o.Spec.Template.Spec
		case *appsv1.Deployment:
			specs[o.Name] = o.Spec.Template.Spec
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
