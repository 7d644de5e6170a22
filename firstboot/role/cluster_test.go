package role

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/manifests"
)

// A master labels its own Node (the master label the anchors select, the
// site's labels) and adds the site's taints once, keeping the kubelet's.
func TestLabelNodeAppliesLabelsAndTaintsOnce(t *testing.T) {
	kubelets := corev1.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m2", Labels: map[string]string{"kubernetes.io/hostname": "m2"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{kubelets}}})
	c := &cluster{kube: kube, log: t.Logf}
	site := []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}}
	for i := 0; i < 2; i++ {
		if err := c.labelNode(context.Background(), "m2", map[string]string{"node-role.kubernetes.io/db": "", "kiln.dev/pool": "a"}, site, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	n, err := kube.CoreV1().Nodes().Get(context.Background(), "m2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{manifests.MasterLabel: "", manifests.RoleLabel: "master", "node-role.kubernetes.io/db": "", "kiln.dev/pool": "a", "kubernetes.io/hostname": "m2"} {
		if got, ok := n.Labels[k]; !ok || got != v {
			t.Errorf("label %s=%q (present %v), want %q", k, got, ok, v)
		}
	}
	if len(n.Spec.Taints) != 2 || !n.Spec.Taints[0].MatchTaint(&kubelets) || !n.Spec.Taints[1].MatchTaint(&site[0]) {
		t.Errorf("taints %+v, want the kubelet's and the site's, once each", n.Spec.Taints)
	}
}

// Before the kubelet registered its Node, labelling waits, within its bound.
func TestLabelNodeWaitsForRegistration(t *testing.T) {
	c := &cluster{kube: fake.NewClientset(), log: t.Logf}
	err := c.labelNode(context.Background(), "w9", nil, nil, 3*time.Second)
	if err == nil {
		t.Fatal("labelled a node that never registered")
	}
}

// The genesis validation pod goes through the scheduler but only onto
// the validating node, and retries cluster DNS for as long as it is told;
// the fake kubelet's logs lack the answer, so the validation fails.
func TestValidatePodStaysOnItsNode(t *testing.T) {
	dns := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: manifests.ClusterDNSService + "-abc", Namespace: metav1.NamespaceSystem,
		Labels: map[string]string{discoveryv1.LabelServiceName: manifests.ClusterDNSService}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.5"}}}}
	kube := fake.NewClientset(dns)
	var created *corev1.Pod
	kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		created = p.DeepCopy()
		p.Status.Phase = corev1.PodSucceeded
		return false, nil, nil
	})
	c := &cluster{kube: kube, log: t.Logf}
	err := c.validatePod(context.Background(), "kiln.local/kiln:x", "cluster.local", "m1", 5*time.Minute, 10*time.Second)
	if err == nil {
		t.Error("validated with logs that never resolved the name")
	}
	if created == nil {
		t.Fatal("no validation pod created")
	}
	if created.Spec.NodeName != "" || created.Spec.NodeSelector[corev1.LabelHostname] != "m1" {
		t.Errorf("pod node name %q, selector %v; want it scheduled onto m1 only", created.Spec.NodeName, created.Spec.NodeSelector)
	}
	if args := strings.Join(created.Spec.Containers[0].Command, " "); !strings.Contains(args, "--retry 5m0s kubernetes.default.svc.cluster.local") {
		t.Errorf("pod command %q, want cluster DNS retried for 5m0s", args)
	}
}

// Every kind among the add-ons has its API resource here, namespaced as
// the object is: a kind without one fails the genesis node's apply.
func TestEveryAddOnKindHasAResource(t *testing.T) {
	n := nodefile.NodeFile{Name: "g1", Role: nodefile.RoleGenesis, Address: "192.0.2.10", Cluster: nodefile.ClusterParams{
		Domain: "cluster.local", PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", ClusterDNS: "10.96.0.10",
		APIServerPort: 6443, DiscoveryName: "kube-apiserver.kiln.internal"}}
	for _, o := range manifests.AddOns(manifests.GenesisParams(n, manifests.Images{})) {
		u, err := toUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		r, ok := resources[u.GetKind()]
		if !ok {
			t.Errorf("%s %s: no resource mapping", u.GetKind(), u.GetName())
			continue
		}
		if r.namespaced != (u.GetNamespace() != "") {
			t.Errorf("%s %s: namespace %q, mapping namespaced %v", u.GetKind(), u.GetName(), u.GetNamespace(), r.namespaced)
		}
	}
}
