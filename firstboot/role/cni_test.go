package role

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/kilnnet"
)

// While a node waits for its own Ready, the agent writes kiln-net's
// conflist as soon as the Node has a pod CIDR, and never replaces a file
// that is there.
func TestReadyWaitSeedsTheCNIConfiguration(t *testing.T) {
	want, err := kilnnet.Conflist("10.244.3.0/24")
	if err != nil {
		t.Fatal(err)
	}
	node := func(cidr string, ready corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}, Spec: corev1.NodeSpec{PodCIDR: cidr},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready,
				LastHeartbeatTime: metav1.Now(), Message: "NetworkPluginNotReady"}}}}
	}
	for _, tc := range []struct {
		name     string
		objects  []*corev1.Node
		existing string // a file already at the conflist's path
		want     []byte // the file afterwards; nil: none
		ready    bool
	}{
		{"pod CIDR given, no file", []*corev1.Node{node("10.244.3.0/24", corev1.ConditionFalse)}, "", want, false},
		{"no pod CIDR yet", []*corev1.Node{node("", corev1.ConditionFalse)}, "", nil, false},
		{"not registered yet", nil, "", nil, false},
		{"a file already there", []*corev1.Node{node("10.244.3.0/24", corev1.ConditionFalse)}, "operator's\n", []byte("operator's\n"), false},
		{"already Ready", []*corev1.Node{node("10.244.3.0/24", corev1.ConditionTrue)}, "", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			path := filepath.Join(root, "etc/cni/net.d", kilnnet.ConfName)
			if tc.existing != "" {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(tc.existing), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			kube := fake.NewClientset()
			for _, o := range tc.objects {
				if _, err := kube.CoreV1().Nodes().Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			n := &Node{Root: root, Log: t.Logf, file: &nodefile.NodeFile{Name: "w1"}, started: time.Now().Add(-time.Minute)}
			err := n.units().cni.selfReady(context.Background(), kube)
			if tc.ready != (err == nil) {
				t.Errorf("selfReady: %v, want ready=%t", err, tc.ready)
			}
			checkConflist(t, path, tc.want)
		})
	}
}

// A genesis node claims the first block of the pod network only while no
// Node has a pod CIDR; otherwise the controller-manager's choice stands.
func TestClaimFirstBlock(t *testing.T) {
	node := func(name, cidr string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr}}
	}
	for _, tc := range []struct {
		name        string
		nodes       []*corev1.Node
		want        string
		wantClaimed bool
		wantErr     bool
	}{
		{"the only Node, no CIDR: claimed", []*corev1.Node{node("g1", "")}, "10.244.0.0/24", true, false},
		{"given already: kept", []*corev1.Node{node("g1", "10.244.7.0/24")}, "10.244.7.0/24", false, false},
		{"another Node has one: the allocator is at work", []*corev1.Node{node("w1", "10.244.0.0/24"), node("g1", "")}, "", false, false},
		{"not registered yet", []*corev1.Node{node("w1", "")}, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset()
			for _, o := range tc.nodes {
				if _, err := kube.CoreV1().Nodes().Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			got, claimed, err := claimFirstBlock(context.Background(), kube, "g1", "10.244.0.0/24")
			if (err != nil) != tc.wantErr || got != tc.want || claimed != tc.wantClaimed {
				t.Fatalf("claimFirstBlock = %q, %t, %v; want %q, %t, error %t", got, claimed, err, tc.want, tc.wantClaimed, tc.wantErr)
			}
			if !tc.wantClaimed {
				return
			}
			g1, err := kube.CoreV1().Nodes().Get(context.Background(), "g1", metav1.GetOptions{})
			if err != nil || g1.Spec.PodCIDR != tc.want || len(g1.Spec.PodCIDRs) != 1 || g1.Spec.PodCIDRs[0] != tc.want {
				t.Errorf("node g1 afterwards: podCIDR %q podCIDRs %v (%v)", g1.Spec.PodCIDR, g1.Spec.PodCIDRs, err)
			}
		})
	}
}

// Before the kubelet starts, the agent writes the conflist for the pod
// CIDR an earlier boot recorded; a Ready node records its Node's CIDR.
func TestRecordedPodCIDRRestoresTheCNIConfiguration(t *testing.T) {
	want, err := kilnnet.Conflist("10.244.3.0/24")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		record   string // "": none
		existing string
		want     []byte
	}{
		{"recorded", "10.244.3.0/24\n", "", want},
		{"nothing recorded", "", "", nil},
		{"a record that is no CIDR", "10.244.3.0\n", "", nil},
		{"a file already there", "10.244.3.0/24\n", "operator's\n", []byte("operator's\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write := func(p, s string) {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.record != "" {
				write(PodCIDRRecord, tc.record)
			}
			if tc.existing != "" {
				write(conflistPath, tc.existing)
			}
			n := &Node{Root: root, Log: t.Logf, file: &nodefile.NodeFile{Name: "w1"}}
			n.units().cni.restoreCNI()
			checkConflist(t, filepath.Join(root, conflistPath), tc.want)
		})
	}
	t.Run("a Ready node records its pod CIDR", func(t *testing.T) {
		root := t.TempDir()
		kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}, Spec: corev1.NodeSpec{PodCIDR: "10.244.9.0/24"},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}}})
		n := &Node{Root: root, Log: t.Logf, file: &nodefile.NodeFile{Name: "w1"}, started: time.Now().Add(-time.Minute)}
		if err := n.units().cni.selfReady(context.Background(), kube); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(root, PodCIDRRecord))
		if string(got) != "10.244.9.0/24\n" {
			t.Errorf("record %q (%v), want the Node's pod CIDR", got, err)
		}
	})
}

// checkConflist wants the file at path to hold want, or no file for nil.
func checkConflist(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if want == nil {
		if err == nil {
			t.Errorf("a conflist was written: %s", got)
		}
		return
	}
	if string(got) != string(want) {
		t.Errorf("conflist %q, want %q (%v)", got, want, err)
	}
}

// Until a controller-manager has run, the genesis node gives each Node
// registered without a pod CIDR the lowest block no Node has; once one
// has run (its lease exists) the allocator's choice stands.
func TestGivePodCIDRs(t *testing.T) {
	node := func(name, cidr string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr}}
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: controllerManagerLease, Namespace: metav1.NamespaceSystem}}
	for _, tc := range []struct {
		name    string
		network string
		objects []runtime.Object
		want    map[string]string
		wantErr string
	}{
		{"the joiners get the blocks after the genesis node's", "10.244.0.0/16",
			[]runtime.Object{node("m1", "10.244.0.0/24"), node("m2", ""), node("w1", "")},
			map[string]string{"m2": "10.244.1.0/24", "w1": "10.244.2.0/24"}, ""},
		{"a block in use is skipped", "10.244.0.0/16",
			[]runtime.Object{node("m1", "10.244.0.0/24"), node("m2", ""), node("m3", "10.244.1.0/24")},
			map[string]string{"m2": "10.244.2.0/24"}, ""},
		{"IPv6: /64 blocks", "fd00:10:244::/56",
			[]runtime.Object{node("m1", "fd00:10:244::/64"), node("w1", "")},
			map[string]string{"w1": "fd00:10:244:1::/64"}, ""},
		{"a controller-manager has run: nothing given", "10.244.0.0/16",
			[]runtime.Object{lease, node("m1", "10.244.0.0/24"), node("w1", "")}, map[string]string{}, ""},
		{"the network is full", "10.244.0.0/23",
			[]runtime.Object{node("m1", "10.244.0.0/24"), node("m2", "10.244.1.0/24"), node("w1", "")},
			map[string]string{}, "the pod network 10.244.0.0/23 has no free /24 block for node w1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset(tc.objects...)
			given, err := givePodCIDRs(context.Background(), kube, netip.MustParsePrefix(tc.network))
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			if !maps.Equal(given, tc.want) {
				t.Errorf("given %v, want %v", given, tc.want)
			}
			for name, cidr := range tc.want {
				nd, err := kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
				if err != nil || nd.Spec.PodCIDR != cidr || !slices.Equal(nd.Spec.PodCIDRs, []string{cidr}) {
					t.Errorf("node %s afterwards: podCIDR %q podCIDRs %v (%v), want %s", name, nd.Spec.PodCIDR, nd.Spec.PodCIDRs, err, cidr)
				}
			}
		})
	}
}

// readyzAt is a fake clientset whose /readyz is served by srv: what the
// wait for the apiserver polls.
type readyzAt struct {
	*fake.Clientset
	srv *httptest.Server
}

func (k readyzAt) Discovery() discovery.DiscoveryInterfaces {
	return discovery.NewDiscoveryClientForConfigOrDie(&rest.Config{Host: k.srv.URL})
}

// While a new cluster's apiserver runs its post-start hooks, the genesis
// node gives the Nodes that registered meanwhile their pod CIDRs, not
// only once the apiserver is ready; on a later boot (its
// controller-manager's static pod written) it gives none.
func TestGenesisGivesPodCIDRsWhileItsAPIServerStarts(t *testing.T) {
	for _, tc := range []struct {
		name        string
		laterBoot   bool
		want        map[string]string
		wantConsole string
	}{
		{name: "a new cluster", want: map[string]string{"m2": "10.244.1.0/24", "w1": "10.244.2.0/24"},
			wantConsole: "pod CIDR 10.244.1.0/24 given to node m2, registered before the controller-manager runs"},
		{name: "a later boot", laterBoot: true, want: map[string]string{"m2": "", "w1": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := nodeRoot(t, "g1")
			var polls, givenBeforeReady atomic.Int32
			kube := fake.NewClientset(
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "g1"}, Spec: corev1.NodeSpec{PodCIDR: "10.244.0.0/24"}},
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m2"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if polls.Add(1) <= 2 {
					if nd, err := kube.CoreV1().Nodes().Get(r.Context(), "w1", metav1.GetOptions{}); err == nil && nd.Spec.PodCIDR != "" {
						givenBeforeReady.Add(1)
					}
					http.Error(w, "[-]poststarthook/rbac/bootstrap-roles failed", http.StatusInternalServerError)
					return
				}
				fmt.Fprint(w, "ok")
			}))
			defer srv.Close()
			var console []string
			n := &Node{Root: root, Sys: &recorder{}, Wait: time.Minute, Log: func(f string, a ...any) { console = append(console, fmt.Sprintf(f, a...)) },
				APIAt: func(string) (kubernetes.Interface, error) { return readyzAt{kube, srv}, nil }}
			n.file, n.cat = mustLoad(t, n)
			if tc.laterBoot {
				dir := filepath.Join(root, manifests.StaticPodDir)
				os.MkdirAll(dir, 0o755)
				os.WriteFile(filepath.Join(dir, "kube-controller-manager.yaml"), nil, 0o644)
			}
			if err := n.units().plane.waitGenesisAPIServer(context.Background()); err != nil {
				t.Fatal(err)
			}
			for name, cidr := range tc.want {
				nd, err := kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
				if err != nil || nd.Spec.PodCIDR != cidr {
					t.Errorf("node %s: pod CIDR %q (%v), want %q", name, nd.Spec.PodCIDR, err, cidr)
				}
			}
			if !tc.laterBoot && givenBeforeReady.Load() == 0 {
				t.Error("w1 got its pod CIDR only once the apiserver was ready")
			}
			if tc.wantConsole != "" {
				wantInOrder(t, console, []string{tc.wantConsole})
			}
		})
	}
}
