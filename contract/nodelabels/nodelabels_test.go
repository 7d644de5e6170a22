package nodelabels

import (
	"context"
	"errors"
	"fmt"
	"maps"
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

// The site in a master's node file: w1 gets a worker role, a zone and a
// pool (which its kubelet sets itself); w2 gets nothing a master applies.
var siteLabels = map[string]map[string]string{
	"w1": {"node-role.kubernetes.io/worker": "", "topology.kubernetes.io/zone": "rack-2"},
	"w2": {},
}

func reconciler(kube *fake.Clientset, log *[]string) *Reconciler {
	return &Reconciler{Kube: kube, Site: func() (map[string]map[string]string, error) { return siteLabels, nil },
		Log: func(f string, a ...any) { *log = append(*log, fmt.Sprintf(f, a...)) }}
}

// A master applies what a worker requests only when the site gives that
// worker the label, with that value: each rule refuses a request, names
// the refusal in its log, and leaves the others applied.
func TestReconcileAppliesOnlyWhatTheSiteGives(t *testing.T) {
	for _, tc := range []struct {
		name, node string
		request    map[string]string
		applied    map[string]string // beyond what the Node had
		refused    string            // in the log line of the refusal
	}{
		{name: "the site's labels", node: "w1", request: map[string]string{"node-role.kubernetes.io/worker": "", "topology.kubernetes.io/zone": "rack-2"},
			applied: map[string]string{"node-role.kubernetes.io/worker": "", "topology.kubernetes.io/zone": "rack-2"}},
		{name: "another role", node: "w1", request: map[string]string{"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/ingress": ""},
			applied: map[string]string{"node-role.kubernetes.io/worker": ""}, refused: "node-role.kubernetes.io/ingress= not applied: the site does not give w1 this label"},
		{name: "another kubernetes.io label", node: "w1", request: map[string]string{"kubernetes.io/os": "plan9"},
			refused: "kubernetes.io/os=plan9 not applied: the site does not give w1 this label"},
		{name: "a k8s.io label", node: "w1", request: map[string]string{"example.k8s.io/trusted": "yes"},
			refused: "example.k8s.io/trusted=yes not applied: the site does not give w1 this label"},
		{name: "another value", node: "w1", request: map[string]string{"topology.kubernetes.io/zone": "rack-9"},
			refused: `the site gives w1 the value "rack-2", not "rack-9"`},
		{name: "the control plane", node: "w1", request: map[string]string{"node-role.kubernetes.io/control-plane": ""},
			refused: "node-role.kubernetes.io/control-plane= not applied: marks the control plane"},
		{name: "isolation", node: "w1", request: map[string]string{"node-restriction.kubernetes.io/secure": "true"},
			refused: "node-restriction.kubernetes.io/secure=true not applied: node-restriction.kubernetes.io/ labels"},
		{name: "a label the kubelet sets", node: "w1", request: map[string]string{"kiln.dev/pool": "edge"},
			refused: "kiln.dev/pool=edge not applied: the kubelet sets it itself"},
		{name: "a worker the site gives nothing", node: "w2", request: map[string]string{"node-role.kubernetes.io/worker": ""},
			refused: "the site does not give w2 this label"},
		{name: "a node the site does not name", node: "x9", request: map[string]string{"node-role.kubernetes.io/worker": ""},
			refused: "this master's node file names no worker x9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: tc.node, Labels: map[string]string{"kubernetes.io/hostname": tc.node}}})
			ctx := context.Background()
			if err := Request(ctx, kube, tc.node, tc.request); err != nil {
				t.Fatal(err)
			}
			var log []string
			if err := reconciler(kube, &log).Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			got, _ := kube.CoreV1().Nodes().Get(ctx, tc.node, metav1.GetOptions{})
			want := map[string]string{"kubernetes.io/hostname": tc.node}
			maps.Copy(want, tc.applied)
			if !maps.Equal(got.Labels, want) {
				t.Errorf("labels %v, want %v", got.Labels, want)
			}
			joined := strings.Join(log, "\n")
			if tc.refused != "" && !strings.Contains(joined, tc.refused) {
				t.Errorf("log:\n%s\nwant a refusal naming %q", joined, tc.refused)
			}
			if tc.refused == "" && strings.Contains(joined, "not applied") {
				t.Errorf("log:\n%s\nwant no refusal", joined)
			}
		})
	}
}

// A pass applies what is missing once; the next changes nothing and
// names no refusal again; an unreadable request is named and the other
// Nodes are still done.
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
	}); err != nil {
		t.Fatal(err)
	}
	var log []string
	r := reconciler(kube, &log)
	err := r.Reconcile(ctx)
	if err == nil || !strings.Contains(err.Error(), "node w9: annotation "+Annotation) {
		t.Errorf("err = %v, want the unreadable request on w9 named", err)
	}
	got, _ := kube.CoreV1().Nodes().Get(ctx, "w1", metav1.GetOptions{})
	want := map[string]string{"kiln.dev/pool": "edge", "node-role.kubernetes.io/worker": "", "topology.kubernetes.io/zone": "rack-2"}
	if !maps.Equal(got.Labels, want) {
		t.Errorf("w1 labels %v, want %v", got.Labels, want)
	}
	if m, _ := kube.CoreV1().Nodes().Get(ctx, "m1", metav1.GetOptions{}); len(m.Labels) != 0 {
		t.Errorf("m1, which requested nothing, got labels %v", m.Labels)
	}
	if n := strings.Count(strings.Join(log, "\n"), "node-role.kubernetes.io/control-plane= not applied"); n != 1 {
		t.Errorf("the refusal of the control-plane label is named %d times:\n%s", n, strings.Join(log, "\n"))
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

// Without the site's labels nothing is applied.
func TestReconcileWithoutTheSiteAppliesNothing(t *testing.T) {
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}})
	ctx := context.Background()
	if err := Request(ctx, kube, "w1", map[string]string{"node-role.kubernetes.io/worker": ""}); err != nil {
		t.Fatal(err)
	}
	for name, site := range map[string]func() (map[string]map[string]string, error){
		"no source":     nil,
		"an unreadable": func() (map[string]map[string]string, error) { return nil, errors.New("no node file") },
	} {
		kube.ClearActions()
		r := &Reconciler{Kube: kube, Site: site, Log: t.Logf}
		if err := r.Reconcile(ctx); err == nil {
			t.Errorf("%s: no error", name)
		}
		for _, a := range kube.Actions() {
			if a.GetVerb() == "patch" {
				t.Errorf("%s: patched %v", name, a)
			}
		}
	}
}

func TestRequestWritesNothingEmpty(t *testing.T) {
	kube := fake.NewClientset()
	if err := Request(context.Background(), kube, "w1", nil); err != nil || len(kube.Actions()) != 0 {
		t.Errorf("err %v, actions %v", err, kube.Actions())
	}
}
