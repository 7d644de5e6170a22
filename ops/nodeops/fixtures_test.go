package nodeops

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// testSite is three masters and two workers, w2 on DHCP.
const testSite = `apiVersion: kiln.dev/v1alpha1
kind: Site
cluster: {name: lab, kubernetesVersion: v1.37.1, podCIDR: 10.244.0.0/16, serviceCIDR: 10.96.0.0/12}
nodes:
  - {name: m1, role: genesis, macs: ["52:54:00:00:00:11"], installDisk: /dev/vda, network: {address: 10.0.0.11/24, gateway: 10.0.0.1}}
  - {name: m2, role: master, macs: ["52:54:00:00:00:12"], installDisk: /dev/vda, network: {address: 10.0.0.12/24, gateway: 10.0.0.1}}
  - {name: m3, role: master, macs: ["52:54:00:00:00:13"], installDisk: /dev/vda, network: {address: 10.0.0.13/24, gateway: 10.0.0.1}}
  - {name: w1, role: worker, macs: ["52:54:00:00:00:21"], installDisk: /dev/vda, network: {address: 10.0.0.21/24, gateway: 10.0.0.1}}
  - {name: w2, role: worker, macs: ["52:54:00:00:00:22"], installDisk: /dev/vda, network: {dhcp: true}}
`

// oneMasterSite is a genesis node and a worker.
const oneMasterSite = `apiVersion: kiln.dev/v1alpha1
kind: Site
cluster: {name: lab, kubernetesVersion: v1.37.1, podCIDR: 10.244.0.0/16, serviceCIDR: 10.96.0.0/12}
nodes:
  - {name: m1, role: genesis, macs: ["52:54:00:00:00:11"], installDisk: /dev/vda, network: {address: 10.0.0.11/24, gateway: 10.0.0.1}}
  - {name: w1, role: worker, macs: ["52:54:00:00:00:21"], installDisk: /dev/vda, network: {address: 10.0.0.21/24, gateway: 10.0.0.1}}
`

// twoMasterSite is the QEMU cluster's shape: two masters, a worker.
const twoMasterSite = `apiVersion: kiln.dev/v1alpha1
kind: Site
cluster: {name: lab, kubernetesVersion: v1.37.1, podCIDR: 10.244.0.0/16, serviceCIDR: 10.96.0.0/12}
nodes:
  - {name: m1, role: genesis, macs: ["52:54:00:00:00:11"], installDisk: /dev/vda, network: {address: 10.0.0.11/24, gateway: 10.0.0.1}}
  - {name: m2, role: master, macs: ["52:54:00:00:00:12"], installDisk: /dev/vda, network: {address: 10.0.0.12/24, gateway: 10.0.0.1}}
  - {name: w1, role: worker, macs: ["52:54:00:00:00:21"], installDisk: /dev/vda, network: {address: 10.0.0.21/24, gateway: 10.0.0.1}}
`

func parseSite(t *testing.T, yaml string) *site.Site {
	t.Helper()
	s, err := site.Parse("site.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fakeEtcd is a member list; the members whose client URL is in down do
// not answer, and removeErr answers every Remove when set.
type fakeEtcd struct {
	members   []etcdmember.Member
	down      map[string]bool
	listErr   error
	removeErr error
}

func (f *fakeEtcd) MemberList(context.Context) ([]etcdmember.Member, error) {
	if f.listErr != nil {
		return nil, f.listErr
	}
	return slices.Clone(f.members), nil
}

func (f *fakeEtcd) Remove(_ context.Context, id uint64) error {
	if f.removeErr != nil {
		return f.removeErr
	}
	i := slices.IndexFunc(f.members, func(m etcdmember.Member) bool { return m.ID == id })
	if i < 0 {
		return fmt.Errorf("etcdserver: member not found")
	}
	f.members = slices.Delete(f.members, i, i+1)
	return nil
}

func (f *fakeEtcd) Healthy(_ context.Context, clientURL string) error {
	if f.down[clientURL] {
		return fmt.Errorf("%s: context deadline exceeded", clientURL)
	}
	return nil
}

func (f *fakeEtcd) names() []string {
	var out []string
	for _, m := range f.members {
		out = append(out, m.Name)
	}
	return out
}

// member is a started voting member at addr.
func member(id uint64, name, addr string) etcdmember.Member {
	return etcdmember.Member{ID: id, Name: name, PeerURLs: []string{etcdmember.PeerURL(addr)}, ClientURLs: []string{etcdmember.ClientURL(addr)}}
}

var (
	m1 = member(0xa1, "m1", "10.0.0.11")
	m2 = member(0xa2, "m2", "10.0.0.12")
	m3 = member(0xa3, "m3", "10.0.0.13")
)

// downURLs marks members as not answering.
func downURLs(ms ...etcdmember.Member) map[string]bool {
	out := map[string]bool{}
	for _, m := range ms {
		out[m.ClientURLs[0]] = true
	}
	return out
}

// kubeNode is a Node with a Ready condition, InternalIP and kubelet
// version, labelled with its role as kiln labels it: kiln.dev/role by
// its kubelet, and a master's master label by its agent.
func kubeNode(name, role, addr string, ready corev1.ConditionStatus, mutate ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{manifests.RoleLabel: role}}}
	if role == site.RoleGenesis || role == site.RoleMaster {
		n.Labels[manifests.MasterLabel] = ""
	}
	defer func() {
		for _, m := range mutate {
			m(n)
		}
	}()
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
	if addr != "" {
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr}}
	}
	n.Status.NodeInfo.KubeletVersion = "v1.37.1"
	if name != "x9" { // a Node the site does not name, from an image before kiln published its version
		n.Annotations = map[string]string{nodefile.VersionAnnotation: "v0.9.0"}
	}
	return n
}

// labelled sets a Node's label.
func labelled(key, value string) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Labels[key] = value }
}

func booted(id string) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Status.NodeInfo.BootID = id }
}

func annotated(key, value string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[key] = value
	}
}

// pod is a pod on node; owner is its controller's kind ("" for none).
func pod(ns, name, node, owner string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name)}}
	p.Spec.NodeName = node
	p.Status.Phase = corev1.PodRunning
	if owner != "" {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{Kind: owner, Name: name + "-owner", Controller: &yes, APIVersion: "apps/v1"}}
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func withEmptyDir(p *corev1.Pod) {
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
}

func mirror(p *corev1.Pod) {
	p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "hash"}
}

// Evictions, as the fake clientset answers them.
const (
	evictDeletes = ""      // the kubelet stops the pod at once
	evictStuck   = "stuck" // the kubelet is gone: the pod stays terminating
	evictPDB     = "pdb"   // a disruption budget refuses
)

// clientset is a fake apiserver holding objs whose evictions behave as
// how says.
func clientset(how string, objs ...runtime.Object) *fake.Clientset {
	cs := fake.NewClientset(objs...)
	pods := corev1.SchemeGroupVersion.WithResource("pods")
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		switch how {
		case evictPDB:
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
		case evictStuck:
			obj, err := cs.Tracker().Get(pods, ev.Namespace, ev.Name)
			if err != nil {
				return true, nil, err
			}
			p := obj.(*corev1.Pod).DeepCopy()
			now := metav1.Now()
			p.DeletionTimestamp = &now
			return true, nil, cs.Tracker().Update(pods, p, ev.Namespace)
		}
		return true, nil, cs.Tracker().Delete(pods, ev.Namespace, ev.Name)
	})
	return cs
}

// podNames are the pods left in the fake, sorted.
func podNames(t *testing.T, cs *fake.Clientset) []string {
	t.Helper()
	l, err := cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, p := range l.Items {
		names[p.Namespace+"/"+p.Name] = true
	}
	return slices.Sorted(maps.Keys(names))
}
