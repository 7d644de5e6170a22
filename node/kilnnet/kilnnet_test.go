package kilnnet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var cluster = netip.MustParsePrefix("10.244.0.0/16")

func node(name, podCIDR string, addrs ...corev1.NodeAddress) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	n.Spec.PodCIDR = podCIDR
	if podCIDR != "" {
		n.Spec.PodCIDRs = []string{podCIDR}
	}
	n.Status.Addresses = addrs
	return n
}

func internal(ip string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip}
}

func TestConflistDoesNotMasquerade(t *testing.T) {
	data, err := Conflist("10.244.1.0/24")
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		t.Fatal(err)
	}
	if b := conf.Plugins[0]; b["type"] != "bridge" || b["ipMasq"] != false || b["bridge"] != "kiln0" {
		t.Errorf("bridge plugin %v: want kiln0 with ipMasq false (KILN-POSTROUTING masquerades)", b)
	}
	if !strings.Contains(string(data), `"subnet": "10.244.1.0/24"`) {
		t.Errorf("the pod CIDR is not the IPAM range:\n%s", data)
	}
}

func TestDesiredRoutes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []*corev1.Node
		want  []string
		notes []string
	}{
		{name: "one route per other node via its InternalIP",
			nodes: []*corev1.Node{
				node("m1", "10.244.0.0/24", internal("10.77.0.11")),
				node("m2", "10.244.1.0/24", corev1.NodeAddress{Type: corev1.NodeHostName, Address: "m2"}, internal("10.77.0.12")),
				node("w1", "10.244.2.0/24", corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "192.0.2.9"}, internal("10.77.0.13")),
			},
			want: []string{"10.244.1.0/24 via 10.77.0.12 (m2)", "10.244.2.0/24 via 10.77.0.13 (w1)"}},
		{name: "a node alone has no routes",
			nodes: []*corev1.Node{node("m1", "10.244.0.0/24", internal("10.77.0.11"))}},
		{name: "no pod CIDR or no address yet",
			nodes: []*corev1.Node{
				node("m1", "10.244.0.0/24", internal("10.77.0.11")),
				node("m2", "", internal("10.77.0.12")),
				node("w1", "10.244.2.0/24", corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "10.77.0.13"}),
			},
			notes: []string{"node m2 has no pod CIDR yet: no route to its pods",
				"node w1 has no InternalIP address for its pod CIDR 10.244.2.0/24 yet: no route"}},
		{name: "a pod CIDR outside the cluster's is never routed",
			nodes: []*corev1.Node{
				node("m1", "10.244.0.0/24", internal("10.77.0.11")),
				node("m2", "192.168.0.0/24", internal("10.77.0.12")),
				node("w1", "10.0.0.0/8", internal("10.77.0.13")),
			},
			notes: []string{"node m2: pod CIDR 192.168.0.0/24 is outside the cluster pod CIDR 10.244.0.0/16: no route",
				"node w1: pod CIDR 10.0.0.0/8 is outside the cluster pod CIDR 10.244.0.0/16: no route"}},
		{name: "dual stack: the cluster family's CIDR via the same family's address",
			nodes: []*corev1.Node{
				node("m1", "10.244.0.0/24", internal("10.77.0.11")),
				func() *corev1.Node {
					n := node("m2", "fd00:10:244:1::/64", internal("fd00::12"), internal("10.77.0.12"))
					n.Spec.PodCIDRs = []string{"fd00:10:244:1::/64", "10.244.1.0/24"}
					return n
				}(),
			},
			want: []string{"10.244.1.0/24 via 10.77.0.12 (m2)"}},
		{name: "only spec.podCIDR set (older nodes)",
			nodes: []*corev1.Node{func() *corev1.Node {
				n := node("m2", "10.244.1.0/24", internal("10.77.0.12"))
				n.Spec.PodCIDRs = nil
				return n
			}()},
			want: []string{"10.244.1.0/24 via 10.77.0.12 (m2)"}},
		{name: "a CIDR claimed twice goes to the first node by name",
			nodes: []*corev1.Node{
				node("w2", "10.244.1.0/24", internal("10.77.0.14")),
				node("w1", "10.244.1.0/24", internal("10.77.0.13")),
			},
			want:  []string{"10.244.1.0/24 via 10.77.0.13 (w1)"},
			notes: []string{"node w2: pod CIDR 10.244.1.0/24 is also node w1's: it goes via w1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var nodes []corev1.Node
			for _, n := range tc.nodes {
				nodes = append(nodes, *n)
			}
			routes, notes := DesiredRoutes(nodes, "m1", cluster)
			var got []string
			for _, r := range routes {
				got = append(got, fmt.Sprintf("%s (%s)", r, r.Node))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("routes %q, want %q", got, tc.want)
			}
			if !reflect.DeepEqual(notes, tc.notes) {
				t.Errorf("notes %q, want %q", notes, tc.notes)
			}
		})
	}
}

// fakeRoutes is a routing table holding kiln-net's routes and, apart, an
// operator's, which List never shows.
type fakeRoutes struct {
	mu       sync.Mutex
	kiln     map[netip.Prefix]netip.Addr
	operator map[netip.Prefix]netip.Addr
	failAdd  error
}

func (f *fakeRoutes) List(context.Context) ([]Route, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Route
	for d, v := range f.kiln {
		out = append(out, Route{Dst: d, Via: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Dst.String() < out[j].Dst.String() })
	return out, nil
}

func (f *fakeRoutes) Add(_ context.Context, r Route) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.operator[r.Dst]; ok {
		return fmt.Errorf("RTNETLINK answers: File exists")
	}
	if f.failAdd != nil {
		return f.failAdd
	}
	f.kiln[r.Dst] = r.Via
	return nil
}

func (f *fakeRoutes) Replace(_ context.Context, r Route) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kiln[r.Dst] = r.Via
	return nil
}

func (f *fakeRoutes) Delete(_ context.Context, r Route) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.kiln, r.Dst)
	return nil
}

func (f *fakeRoutes) String() string {
	rs, _ := f.List(context.Background())
	var parts []string
	for _, r := range rs {
		parts = append(parts, r.String())
	}
	return strings.Join(parts, ", ")
}

type fakeFirewall struct {
	mu    sync.Mutex
	calls []netip.Prefix
}

func (f *fakeFirewall) Ensure(_ context.Context, c netip.Prefix) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
	if len(f.calls) == 1 {
		return []string{"chain KILN-FORWARD (filter) created"}, nil
	}
	return nil, nil
}

type logBuf struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuf) log(f string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(f, a...))
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func newSyncer(t *testing.T, objs ...*corev1.Node) (*syncer, *fake.Clientset, *fakeRoutes, *fakeFirewall, *logBuf) {
	kube := fake.NewClientset()
	for _, n := range objs {
		if _, err := kube.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	routes := &fakeRoutes{kiln: map[netip.Prefix]netip.Addr{}, operator: map[netip.Prefix]netip.Addr{}}
	fw := &fakeFirewall{}
	log := &logBuf{}
	s := &syncer{Config: Config{Kube: kube, Node: "m1", ConfDir: t.TempDir(), ClusterCIDR: cluster, Interval: time.Hour,
		Routes: routes, Firewall: fw, Log: log.log}, notes: map[string]bool{}, owners: map[netip.Prefix]string{}}
	return s, kube, routes, fw, log
}

func TestSyncKeepsRoutesRulesAndConflist(t *testing.T) {
	ctx := context.Background()
	s, kube, routes, fw, log := newSyncer(t,
		node("m1", "10.244.0.0/24", internal("10.77.0.11")),
		node("m2", "10.244.1.0/24", internal("10.77.0.12")),
		node("w1", "10.244.2.0/24", internal("10.77.0.13")))
	// a stale route of kiln-net's (a node removed while it was down)
	routes.kiln[netip.MustParsePrefix("10.244.9.0/24")] = netip.MustParseAddr("10.77.0.19")
	if err := s.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := routes.String(), "10.244.1.0/24 via 10.77.0.12, 10.244.2.0/24 via 10.77.0.13"; got != want {
		t.Errorf("routes %s, want %s", got, want)
	}
	for _, want := range []string{
		"route 10.244.1.0/24 via 10.77.0.12 (node m2) added",
		"route 10.244.2.0/24 via 10.77.0.13 (node w1) added",
		"route 10.244.9.0/24 via 10.77.0.19 removed (no node has that pod CIDR now)",
		"chain KILN-FORWARD (filter) created",
		"wrote " + filepath.Join(s.ConfDir, ConfName) + " for pod CIDR 10.244.0.0/24",
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if conf, err := os.ReadFile(filepath.Join(s.ConfDir, ConfName)); err != nil || !strings.Contains(string(conf), "10.244.0.0/24") {
		t.Errorf("conflist %s %v", conf, err)
	}

	// a second pass with nothing changed logs nothing
	n := len(log.lines)
	if err := s.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if len(log.lines) != n {
		t.Errorf("a pass with nothing to do logged: %q", log.lines[n:])
	}

	// w1 is deleted, m2 moves to another address
	kube.CoreV1().Nodes().Delete(ctx, "w1", metav1.DeleteOptions{})
	m2 := node("m2", "10.244.1.0/24", internal("10.77.0.22"))
	kube.CoreV1().Nodes().Update(ctx, m2, metav1.UpdateOptions{})
	if err := s.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := routes.String(), "10.244.1.0/24 via 10.77.0.22"; got != want {
		t.Errorf("routes %s, want %s", got, want)
	}
	for _, want := range []string{
		"route 10.244.2.0/24 via 10.77.0.13 removed (node w1 is gone or has another pod CIDR)",
		"route 10.244.1.0/24 via 10.77.0.22 (node m2) changed (it went via 10.77.0.12)",
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if len(fw.calls) != 3 || fw.calls[0] != cluster {
		t.Errorf("firewall calls %v: want one per pass for %s", fw.calls, cluster)
	}
	lists := 0
	for _, a := range kube.Actions() {
		if l, ok := a.(k8stesting.ListActionImpl); ok {
			lists++
			if l.ListOptions.ResourceVersion != "0" {
				t.Errorf("a pass listed the Nodes with resourceVersion %q, want 0 (the watch cache, not a quorum read)", l.ListOptions.ResourceVersion)
			}
		}
	}
	if lists != 3 {
		t.Errorf("%d Node lists, want one per pass (3)", lists)
	}
}

// An operator's route to a node's pod CIDR stays: kiln-net says why it has
// no route there, and tries again next pass.
func TestOperatorRouteIsLeftAlone(t *testing.T) {
	s, _, routes, _, log := newSyncer(t,
		node("m1", "10.244.0.0/24", internal("10.77.0.11")),
		node("m2", "10.244.1.0/24", internal("10.77.0.12")))
	op := netip.MustParsePrefix("10.244.1.0/24")
	routes.operator[op] = netip.MustParseAddr("10.77.0.254")
	if err := s.sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if routes.operator[op] != netip.MustParseAddr("10.77.0.254") || len(routes.kiln) != 0 {
		t.Errorf("operator route touched: %v, kiln's %v", routes.operator, routes.kiln)
	}
	if want := "route 10.244.1.0/24 via 10.77.0.12 (node m2): RTNETLINK answers: File exists"; !strings.Contains(log.String(), want) {
		t.Errorf("log lacks %q:\n%s", want, log)
	}
}

func TestNotesAreLoggedWhenTheyChange(t *testing.T) {
	ctx := context.Background()
	s, kube, _, _, log := newSyncer(t, node("m1", "", internal("10.77.0.11")), node("m2", "", internal("10.77.0.12")))
	for range 3 {
		s.sync(ctx)
	}
	if got := strings.Count(log.String(), "node m2 has no pod CIDR yet"); got != 1 {
		t.Errorf("the note was logged %d times, want once:\n%s", got, log)
	}
	if got := strings.Count(log.String(), "node m1 (this node) has no pod CIDR yet"); got != 1 {
		t.Errorf("this node's note logged %d times, want once:\n%s", got, log)
	}
	kube.CoreV1().Nodes().Update(ctx, node("m1", "10.244.0.0/24", internal("10.77.0.11")), metav1.UpdateOptions{})
	s.sync(ctx)
	if !strings.Contains(log.String(), "for pod CIDR 10.244.0.0/24") {
		t.Errorf("no conflist once the pod CIDR came:\n%s", log)
	}
}

// Run reacts to a Node deleted through the watch, long before its
// interval.
func TestRunRemovesADeletedNodesRouteOnTheWatch(t *testing.T) {
	s, kube, routes, _, log := newSyncer(t,
		node("m1", "10.244.0.0/24", internal("10.77.0.11")),
		node("m2", "10.244.1.0/24", internal("10.77.0.12")))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, s.Config) }()
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for routes.String() != want {
			if time.Now().After(deadline) {
				t.Fatalf("routes %q, want %q; log:\n%s", routes.String(), want, log)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("10.244.1.0/24 via 10.77.0.12")
	time.Sleep(200 * time.Millisecond) // let the watch start
	if err := kube.CoreV1().Nodes().Delete(ctx, "m2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestRunNeedsTheClusterCIDR(t *testing.T) {
	s, _, _, _, _ := newSyncer(t)
	s.Config.ClusterCIDR = netip.Prefix{}
	if err := Run(context.Background(), s.Config); err == nil || !strings.Contains(err.Error(), "--cluster-cidr") {
		t.Fatalf("got %v", err)
	}
}
