package nodelabels

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestKubeletMaySet(t *testing.T) {
	for key, want := range map[string]bool{
		"kiln.dev/pool":                         true,
		"plain":                                 true,
		"node.kubernetes.io/instance-type":      true,
		"kubelet.kubernetes.io/x":               true,
		"topology.kubernetes.io/zone":           false,
		"node-role.kubernetes.io/worker":        false,
		"example.k8s.io/x":                      false,
		"node-restriction.kubernetes.io/secure": false,
	} {
		if got := KubeletMaySet(key); got != want {
			t.Errorf("KubeletMaySet(%q) = %v, want %v", key, got, want)
		}
	}
}

// A worker's request is applied but for the labels that would draw the
// control plane or isolated workloads to it; a second pass changes
// nothing and names no refusal again.
func TestReconcileAppliesRequestsOnce(t *testing.T) {
	w1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Labels: map[string]string{"kiln.dev/pool": "edge"}}}
	m1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m1"}}
	broken := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w9", Annotations: map[string]string{Annotation: "{"}}}
	kube := fake.NewClientset(w1, m1, broken)
	ctx := context.Background()
	if err := Request(ctx, kube, "w1", map[string]string{
		"node-role.kubernetes.io/worker":        "",
		"topology.kubernetes.io/zone":           "rack-2",
		"node-role.kubernetes.io/control-plane": "",
		"node-restriction.kubernetes.io/secure": "true",
	}); err != nil {
		t.Fatal(err)
	}
	var log []string
	r := &Reconciler{Kube: kube, Log: func(f string, a ...any) { log = append(log, fmt.Sprintf(f, a...)) }}
	err := r.Reconcile(ctx)
	if err == nil || !strings.Contains(err.Error(), "node w9: annotation "+Annotation) {
		t.Errorf("err = %v, want the unreadable request on w9 named", err)
	}
	got, _ := kube.CoreV1().Nodes().Get(ctx, "w1", metav1.GetOptions{})
	want := map[string]string{"kiln.dev/pool": "edge", "node-role.kubernetes.io/worker": "", "topology.kubernetes.io/zone": "rack-2"}
	if fmt.Sprint(got.Labels) != fmt.Sprint(want) {
		t.Errorf("w1 labels %v, want %v", got.Labels, want)
	}
	if m, _ := kube.CoreV1().Nodes().Get(ctx, "m1", metav1.GetOptions{}); len(m.Labels) != 0 {
		t.Errorf("m1, which requested nothing, got labels %v", m.Labels)
	}
	joined := strings.Join(log, "\n")
	for _, k := range []string{"node-role.kubernetes.io/control-plane", "node-restriction.kubernetes.io/secure"} {
		if strings.Count(joined, "label "+k+" not applied") != 1 {
			t.Errorf("the refusal of %s is not named once:\n%s", k, joined)
		}
	}
	log = nil
	kube.ClearActions()
	r.Reconcile(ctx)
	for _, a := range kube.Actions() {
		if a.GetVerb() == "patch" {
			t.Errorf("second pass patched %v", a)
		}
	}
	if len(log) != 0 {
		t.Errorf("second pass logged %q", log)
	}
}

func TestRequestWritesNothingEmpty(t *testing.T) {
	kube := fake.NewClientset()
	if err := Request(context.Background(), kube, "w1", nil); err != nil || len(kube.Actions()) != 0 {
		t.Errorf("err %v, actions %v", err, kube.Actions())
	}
}
