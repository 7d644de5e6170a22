package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestRatioRow(t *testing.T) {
	floor := 60 * time.Second
	for _, c := range []struct {
		d    time.Duration
		goal float64
		want string
	}{
		{360 * time.Second, 6, "6.00× the floor; goal ≤ 6×: met"},
		{361 * time.Second, 6, "6.02× the floor; goal ≤ 6×: **not met**"},
		{90 * time.Second, 0, "1.50× the floor"},
	} {
		r := ratioRow("x", c.d, floor, c.goal, "")
		if r.note != c.want || r.value != secs(c.d) || r.floor != "60.0 s" {
			t.Errorf("ratioRow(%s, goal %g) = %+v, want note %q", c.d, c.goal, r, c.want)
		}
	}
	if r := ratioRow("x", time.Minute, floor, 4, "n"); !strings.HasSuffix(r.note, "met; n") {
		t.Errorf("note %q, want the extra note last", r.note)
	}
}

// The machines are the QEMU scenario's, in its order: m1 first.
func TestClusterNodes(t *testing.T) {
	var got []string
	for _, n := range clusterNodes() {
		got = append(got, fmt.Sprintf("%s %s %s %d vCPU %d MiB", n.Name, n.Role, n.MAC, n.CPUs, n.MemoryMiB))
	}
	want := []string{
		"m1 genesis 52:54:00:77:00:11 1 vCPU 3072 MiB",
		"m2 master 52:54:00:77:00:12 1 vCPU 3072 MiB",
		"w1 worker 52:54:00:77:00:21 1 vCPU 2048 MiB",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// The bench asks every master the admin kubeconfig reaches, not only its
// current context's: after a power cut the first master's apiserver may
// start last.
func TestMasterClientsHasOnePerContext(t *testing.T) {
	kc := clientcmdapi.NewConfig()
	for _, m := range []struct{ name, addr string }{{"m2", "10.77.0.12"}, {"m1", "10.77.0.11"}} {
		kc.Clusters[m.name] = &clientcmdapi.Cluster{Server: "https://" + m.addr + ":6443", TLSServerName: "kube-apiserver.kiln.internal"}
		kc.Contexts["admin@lab-"+m.name] = &clientcmdapi.Context{Cluster: m.name, AuthInfo: "admin"}
	}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.CurrentContext = "admin@lab-m1"
	admin, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := masterClients(admin, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range got {
		names = append(names, m.context)
	}
	if want := []string{"admin@lab-m1", "admin@lab-m2"}; !slices.Equal(names, want) {
		t.Errorf("clients for %v, want %v", names, want)
	}
	if _, err := masterClients([]byte("kind: Config\napiVersion: v1\n"), nil); err == nil {
		t.Error("a kubeconfig without contexts gave clients")
	}
}

// An apiserver that holds its requests (its port bound, not serving yet)
// does not delay the answer of the master that serves: allReady asks
// every master side by side and returns on the first that sees the three
// Nodes Ready.
func TestAllReadyDoesNotWaitForAHeldMaster(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	held := fake.NewClientset()
	held.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		select { // a TLS handshake that times out, shortened
		case <-release:
		case <-time.After(3 * time.Second):
		}
		return true, nil, errors.New("TLS handshake timeout")
	})
	since := time.Now()
	var nodes []runtime.Object
	for _, name := range []string{"m1", "m2", "w1"} {
		nodes = append(nodes, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(since.Add(time.Second)),
			}}},
		})
	}
	serving := fake.NewClientset(nodes...)

	start := time.Now()
	err := allReady(t.Context(), []masterClient{{"admin@lab-m1", held}, {"admin@lab-m2", serving}}, since)
	if err != nil {
		t.Fatalf("allReady: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("allReady took %s: it waited for the held master", took)
	}
}

// A Node Ready only from a heartbeat before since is not Ready yet; the
// log still sees every Node the list holds.
func TestThreeReadyWantsAHeartbeatSince(t *testing.T) {
	since := time.Now()
	node := func(name string, heartbeat time.Time) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(heartbeat),
		}}}}
	}
	var saw []string
	kube := fake.NewClientset(node("m1", since.Add(-time.Hour)), node("m2", since), node("w1", since))
	err := threeReady(t.Context(), kube, since, func(n *corev1.Node) { saw = append(saw, n.Name) })
	if err == nil || !strings.Contains(err.Error(), "node m1") {
		t.Fatalf("m1's heartbeat from before the restart: %v", err)
	}
	if slices.Sort(saw); !slices.Equal(saw, []string{"m1", "m2", "w1"}) {
		t.Errorf("saw %v, want [m1 m2 w1]", saw)
	}
}
