package nodeops

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// The Drainer cordons and uncordons a Node, each again without harm, and
// drains as the removal does: a pod no controller manages is refused on
// a Ready node, naming it, and left in place.
func TestDrainer(t *testing.T) {
	ctx := context.Background()
	w1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	lonely := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "lonely"}, Spec: corev1.PodSpec{NodeName: "w1"}}
	kube := fake.NewClientset(w1, lonely)
	d := Drainer{Kube: kube}
	var lines []string
	log := func(format string, args ...any) { lines = append(lines, format) }
	unschedulable := func() bool {
		n, err := kube.CoreV1().Nodes().Get(ctx, "w1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Spec.Unschedulable
	}
	for range 2 {
		if err := d.Cordon(ctx, "w1", log); err != nil || !unschedulable() {
			t.Fatalf("Cordon: %v, unschedulable %v", err, unschedulable())
		}
	}
	err := d.Drain(ctx, "w1", log)
	if err == nil || !strings.Contains(err.Error(), "default/lonely (no controller re-creates it") {
		t.Errorf("Drain = %v, want a refusal naming default/lonely", err)
	}
	for range 2 {
		if err := d.Uncordon(ctx, "w1", log); err != nil || unschedulable() {
			t.Fatalf("Uncordon: %v, unschedulable %v", err, unschedulable())
		}
	}
	if err := d.Uncordon(ctx, "w9", log); err == nil || !strings.Contains(err.Error(), "no such Node") {
		t.Errorf("Uncordon of a missing Node = %v", err)
	}
}
