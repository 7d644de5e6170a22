package role

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kiln-project/kiln/contract/discovery"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/gen/nodeconfig"
	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/catalog"
)

const testSite = `apiVersion: kiln.dev/v1alpha1
kind: Site
cluster: {name: t, kubernetesVersion: v1.37.1, podCIDR: 10.244.0.0/16, serviceCIDR: 10.96.0.0/12}
nodes:
  - {name: g1, role: genesis, macs: ["52:54:00:00:00:01"], installDisk: /dev/vda, network: {address: 10.0.2.50/24, gateway: 10.0.2.2}}
  - {name: m2, role: master, macs: ["52:54:00:00:00:02"], installDisk: /dev/vda, network: {address: 10.0.2.51/24, gateway: 10.0.2.2}}
  - {name: w1, role: worker, macs: ["52:54:00:00:00:03"], network: {address: 10.0.2.52/24, gateway: 10.0.2.2}}
`

// nodeRoot lays out a node as kiln gen's config and the image leave it:
// the config's files under root, and a catalog.
func nodeRoot(t *testing.T, name string) (root string, files map[string][]byte) {
	t.Helper()
	s, err := site.Parse("site.yaml", []byte(testSite))
	if err != nil {
		t.Fatal(err)
	}
	st := pki.Store{Dir: filepath.Join(t.TempDir(), "pki")}
	if _, err := st.Ensure(s); err != nil {
		t.Fatal(err)
	}
	files = map[string][]byte{}
	for _, n := range s.Nodes {
		data, err := nodeconfig.Render(s, st, n)
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			Storage struct {
				Files []struct {
					Path     string
					Contents struct{ Source string }
				}
			}
		}
		json.Unmarshal(data, &cfg)
		for _, f := range cfg.Storage.Files {
			b, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(f.Contents.Source, "data:;base64,"))
			files[n.Name+":"+f.Path] = b
		}
	}
	root = t.TempDir()
	for k, b := range files {
		node, p, _ := strings.Cut(k, ":")
		if node == name {
			os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
			os.WriteFile(filepath.Join(root, p), b, 0o600)
		}
	}
	cat := &catalog.Catalog{}
	for _, r := range catalog.Roles {
		cat.Images = append(cat.Images, catalog.Image{Role: r, Ref: "kiln.local/" + r + ":1", Digest: "sha256:00", Archive: "/usr/lib/kiln/images/" + r + ".tar"})
	}
	data, _ := cat.Marshal()
	os.MkdirAll(filepath.Join(root, filepath.Dir(catalog.Path)), 0o755)
	os.WriteFile(filepath.Join(root, catalog.Path), data, 0o644)
	return root, files
}

// recorder records the commands a role runs. It answers the look at the
// node-local DNS link with the address in place, as on a node where
// systemd-networkd configured it, and records that look apart (looks).
type recorder struct{ calls, looks []string }

func (r *recorder) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	cmd := name + " " + strings.Join(args, " ")
	if cmd == "ip -4 -o addr show dev "+discovery.NodeLocalLink {
		r.looks = append(r.looks, cmd)
		return []byte("5: kiln-dns    inet 169.254.20.10/32 scope global kiln-dns\\       valid_lft forever preferred_lft forever\n"), nil
	}
	r.calls = append(r.calls, cmd)
	return nil, nil
}

// etcdAt serves TLS with m2's etcd server certificate, as m2's etcd would.
func etcdAt(t *testing.T, files map[string][]byte) int {
	pair, err := tls.X509KeyPair(files["m2:/etc/kiln/pki/etcd-server.crt"], files["m2:/etc/kiln/pki/etcd-server.key"])
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { // speaks first, as etcd's gRPC server does, and waits for the client to go
				defer c.Close()
				if c.(*tls.Conn).Handshake() == nil {
					c.Write([]byte{0})
					io.Copy(io.Discard, c)
				}
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// pointMastersAtLoopback rewrites the node file so m2 is 127.0.0.1, where
// the test's listener is.
func pointMastersAtLoopback(t *testing.T, root string) {
	p := filepath.Join(root, "/etc/kiln/node.json")
	data, _ := os.ReadFile(p)
	os.WriteFile(p, []byte(strings.ReplaceAll(string(data), `"10.0.2.51"`, `"127.0.0.1"`)), 0o644)
}

// A genesis node whose site's other master already runs etcd never
// bootstraps a second cluster: it turns to the master join, says so,
// and starts its kubelet with no control-plane pod: nothing of etcd is
// written before the join has a member list.
func TestGenesisJoinsWhenAnotherMastersEtcdAnswers(t *testing.T) {
	root, files := nodeRoot(t, "g1")
	pointMastersAtLoopback(t, root)
	sys := &recorder{}
	var log []string
	m2 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m2"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	n := &Node{Root: root, Sys: sys, Wait: time.Second, EtcdPort: etcdAt(t, files),
		APIAt: func(string) (kubernetes.Interface, error) {
			return fake.NewSimpleClientset(m2, clusterDNSSlice(true)), nil
		},
		Log: func(f string, a ...any) { log = append(log, fmt.Sprintf(f, a...)) }}
	_, err := n.Run(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "master/etcd-join: ") {
		t.Fatalf("got %v, want the master join to fail on the fake etcd's member list", err)
	}
	if !slices.Contains(log, "genesis: cluster already exists (m2 answers); joining as a master") {
		t.Errorf("console: %q", log)
	}
	if want := []string{"systemctl start --no-block kubelet.service", "systemctl is-active kiln-images.service"}; !slices.Equal(sys.calls, want) {
		t.Errorf("a genesis node of an existing cluster ran %v, want %v", sys.calls, want)
	}
	pods, _ := filepath.Glob(filepath.Join(root, manifests.StaticPodDir, "*.yaml"))
	if want := []string{filepath.Join(root, manifests.StaticPodDir, "kiln-node-dns.yaml")}; !slices.Equal(pods, want) {
		t.Errorf("a genesis node of an existing cluster wrote static pods %v before its etcd join, want only %v", pods, want)
	}
	if _, err := os.Stat(filepath.Join(root, manifests.EtcdConfigPath)); !os.IsNotExist(err) {
		t.Errorf("a genesis node of an existing cluster wrote etcd's configuration before its join (%v)", err)
	}
}

// A genesis machine that once joined as a master never asks again
// whether the cluster exists: after a whole-cluster power cut the other
// masters' etcd may refuse connections, which would count as absent.
func TestGenesisThatJoinedComesBackAsAMaster(t *testing.T) {
	root, _ := nodeRoot(t, "g1")
	pointMastersAtLoopback(t, root)
	stamp := filepath.Join(root, StampDir, "master", "etcd-join")
	if err := os.MkdirAll(filepath.Dir(stamp), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stamp, []byte("2026-11-26T06:00:00Z\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var log []string
	n := &Node{Root: root, Sys: &recorder{}, Wait: time.Second, EtcdPort: freePort(t),
		Log: func(f string, a ...any) { log = append(log, fmt.Sprintf(f, a...)) }}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := n.Run(ctx)
	if !slices.Contains(log, "genesis: this machine joined the cluster as a master; it comes back as one") {
		t.Errorf("console: %q", log)
	}
	if err != nil && strings.HasPrefix(err.Error(), "genesis/") {
		t.Errorf("ran the genesis phases: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, StampDir, "genesis", "bootstrap")); !os.IsNotExist(err) {
		t.Errorf("a machine that joined recorded a bootstrap (%v)", err)
	}
}

// Failing closed: a master whose port answers TLS with a certificate
// from another CA is not proof that no cluster exists.
func TestGenesisRefusesWhenAMasterCannotBeRuledOut(t *testing.T) {
	root, _ := nodeRoot(t, "g1")
	pointMastersAtLoopback(t, root)
	_, other := nodeRoot(t, "g1") // another site's PKI
	sys := &recorder{}
	n := &Node{Root: root, Sys: sys, Wait: time.Second, EtcdPort: etcdAt(t, other), Log: func(string, ...any) {}}
	_, err := n.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "refusing to bootstrap: master m2 (127.0.0.1:") ||
		!strings.Contains(err.Error(), "not from this site's etcd CA") || !strings.Contains(err.Error(), "different PKIs") {
		t.Fatalf("got %v, want the fail-closed refusal", err)
	}
	if len(sys.calls) != 0 {
		t.Errorf("a refusing node ran %v", sys.calls)
	}
	if _, err := os.Stat(filepath.Join(root, manifests.StaticPodDir)); !os.IsNotExist(err) {
		t.Errorf("a refusing node wrote static pods (%v)", err)
	}
}

// A master with another site's PKI (same names and addresses, another
// kiln gen run) stops at once with the reason, instead of waiting out
// its bound as if the cluster were not up yet, and touches nothing.
func TestMasterOfAnotherSiteIsRefusedAtOnce(t *testing.T) {
	root, _ := nodeRoot(t, "m2")
	p := filepath.Join(root, "/etc/kiln/node.json") // g1, the master m2 joins, at the listener
	data, _ := os.ReadFile(p)
	os.WriteFile(p, []byte(strings.ReplaceAll(string(data), `"10.0.2.50"`, `"127.0.0.1"`)), 0o644)
	_, other := nodeRoot(t, "m2") // another site's PKI
	sys := &recorder{}
	n := &Node{Root: root, Sys: sys, Wait: time.Minute, EtcdPort: etcdAt(t, other), Log: func(string, ...any) {}}
	start := time.Now()
	_, err := n.Run(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "master/wait-cluster: ") || !strings.Contains(err.Error(), "not from this site's etcd CA") {
		t.Fatalf("got %v, want the wait for the cluster to end on the foreign CA", err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the refusal took %s: it waited as if the cluster were not up yet", took)
	}
	if len(sys.calls) != 0 {
		t.Errorf("a refused master ran %v", sys.calls)
	}
	if _, err := os.Stat(filepath.Join(root, manifests.StaticPodDir)); !os.IsNotExist(err) {
		t.Errorf("a refused master wrote static pods (%v)", err)
	}
}

func TestGenesisProceedsWhenNoEtcdAnswers(t *testing.T) {
	root, _ := nodeRoot(t, "g1")
	pointMastersAtLoopback(t, root)
	// freePort: nothing listens there
	n := &Node{Root: root, Sys: &recorder{}, Wait: time.Second, EtcdPort: freePort(t), Log: func(string, ...any) {}}
	n.file, n.cat = mustLoad(t, n)
	if err := n.units().survey.requireNoCluster(context.Background()); err != nil {
		t.Fatalf("no etcd answers, yet: %v", err)
	}
}

func mustLoad(t *testing.T, n *Node) (*nodefile.NodeFile, *catalog.Catalog) {
	t.Helper()
	res, err := loadFiles(n)
	if err != nil {
		t.Fatal(err)
	}
	return res.file, res.cat
}

func TestWorkerWritesItsFilesAndStartsTheKubelet(t *testing.T) {
	root, _ := nodeRoot(t, "w1")
	sys := &recorder{}
	n := &Node{Root: root, Sys: sys, Wait: time.Second, Log: func(string, ...any) {}}
	res, err := n.Run(context.Background())
	if res.Role != "worker" || err == nil || !strings.HasPrefix(err.Error(), "worker/node-ready: node w1 Ready: gave up after 1s") {
		t.Fatalf("worker with no cluster to join: %+v %v", res, err)
	}
	for _, p := range []string{"/etc/kiln/kubelet.yaml", "/etc/kiln/kubelet.env", manifests.StaticPodDir + "/kiln-node-dns.yaml", manifests.ZoneFile, manifests.CorefilePath} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, manifests.StaticPodDir, "etcd.yaml")); err == nil {
		t.Error("a worker got an etcd static pod")
	}
	resolv, _ := os.ReadFile(filepath.Join(root, "/etc/resolv.conf"))
	if !strings.Contains(string(resolv), "nameserver 169.254.20.10") {
		t.Errorf("host resolv.conf: %q", resolv)
	}
	env, _ := os.ReadFile(filepath.Join(root, "/etc/kiln/kubelet.env"))
	if !strings.Contains(string(env), "--node-ip=10.0.2.52 --hostname-override=w1 --node-labels=kiln.dev/role=worker") || !strings.Contains(string(env), " --housekeeping-interval=10s\n") {
		t.Errorf("kubelet.env: %q", env)
	}
	if len(sys.calls) != 1 || sys.calls[0] != "systemctl start --no-block kubelet.service" {
		t.Errorf("commands: %v", sys.calls)
	}
}

// A node kiln node remove took out stays out on every later boot: the
// role writes nothing and starts nothing.
func TestRemovedNodeStaysOut(t *testing.T) {
	root, _ := nodeRoot(t, "w1")
	stamp := filepath.Join(root, nodefile.RemovedStamp)
	if err := os.MkdirAll(filepath.Dir(stamp), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stamp, []byte("removed from the cluster by kiln node remove at 2026-11-25T03:00:00Z\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sys := &recorder{}
	n := &Node{Root: root, Sys: sys, Wait: time.Second, Log: func(string, ...any) {}}
	_, err := n.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "removed from the cluster by kiln node remove at 2026-11-25T03:00:00Z; it stays out") {
		t.Fatalf("removed node: %v", err)
	}
	if len(sys.calls) != 0 {
		t.Errorf("a removed node ran %v", sys.calls)
	}
	if _, err := os.Stat(filepath.Join(root, "/etc/kiln/kubelet.yaml")); err == nil {
		t.Error("a removed node wrote its kubelet config")
	}
}

// scripted answers systemctl is-active with the states in turn, as
// systemctl does: the state on stdout, exit 0 only for active.
type scripted struct{ states []string }

func (s *scripted) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	state := s.states[0]
	if len(s.states) > 1 {
		s.states = s.states[1:]
	}
	if state == "active" {
		return []byte(state + "\n"), nil
	}
	return []byte(state + "\n"), fmt.Errorf("%s %v: exit status 3", name, args)
}

// A joining master adds its learner only once its images are in; a
// failed import ends the wait at once, naming where to look.
func TestMasterWaitsForItsImages(t *testing.T) {
	for _, tc := range []struct {
		states  []string
		bound   time.Duration
		wantErr string
	}{
		{[]string{"activating", "activating", "active"}, 10 * time.Second, ""},
		{[]string{"failed"}, 10 * time.Second, "kiln-images.service failed: journalctl -u kiln-images.service says why"},
		{[]string{"activating"}, 3 * time.Second, "the node's images (kiln-images.service): gave up after 3s: kiln-images.service is activating"},
	} {
		n := &Node{Sys: &scripted{states: tc.states}, Wait: tc.bound, Log: func(string, ...any) {}}
		err := waitImages(context.Background(), n.Sys, n.Wait, n.Log)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%v: %v, want %q", tc.states, err, tc.wantErr)
		}
	}
}

// clusterDNSSlice is cluster DNS's endpoint slice with one pod, ready or
// not.
func clusterDNSSlice(ready bool) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "kube-dns-x", Namespace: "kube-system",
		Labels: map[string]string{discoveryv1.LabelServiceName: manifests.ClusterDNSService}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}}
}

// A joining master adds nothing to etcd until one master, asked through
// its own apiserver, has its Node Ready and cluster DNS serving: the
// genesis node's bootstrap is over.
func TestMasterWaitsForASettledCluster(t *testing.T) {
	node := func(name string, ready corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Message: "kubelet says " + string(ready)}}}}
	}
	dns := clusterDNSSlice
	masters := []nodefile.Member{{Name: "m1", Address: "10.0.0.1"}, {Name: "m3", Address: "10.0.0.3"}}
	down := errors.New("dial tcp: connection refused")
	for _, tc := range []struct {
		name    string
		apis    map[string]*fake.Clientset // by address; absent: the apiserver does not answer
		wantErr string
	}{
		{"genesis still bootstrapping", map[string]*fake.Clientset{"10.0.0.1": fake.NewSimpleClientset(node("m1", corev1.ConditionFalse))},
			"master m1 (10.0.0.1): node m1: Ready=False"},
		{"no apiserver yet", map[string]*fake.Clientset{}, "master m1 (10.0.0.1): dial tcp: connection refused"},
		{"node not registered yet", map[string]*fake.Clientset{"10.0.0.1": fake.NewSimpleClientset()}, `nodes "m1" not found`},
		{"genesis Ready, no cluster DNS yet", map[string]*fake.Clientset{"10.0.0.1": fake.NewSimpleClientset(node("m1", corev1.ConditionTrue))},
			"service kube-system/kube-dns: no ready endpoint (0 not ready)"},
		{"genesis Ready, cluster DNS starting", map[string]*fake.Clientset{"10.0.0.1": fake.NewSimpleClientset(node("m1", corev1.ConditionTrue), dns(false))},
			"no ready endpoint (1 not ready)"},
		{"genesis Ready, cluster DNS serving", map[string]*fake.Clientset{"10.0.0.1": fake.NewSimpleClientset(node("m1", corev1.ConditionTrue), dns(true))}, ""},
		{"another master settled", map[string]*fake.Clientset{"10.0.0.3": fake.NewSimpleClientset(node("m3", corev1.ConditionTrue), dns(true))}, ""},
	} {
		err := firstSettledMaster(context.Background(), masters, func(address string) (kubernetes.Interface, error) {
			if c, ok := tc.apis[address]; ok {
				return c, nil
			}
			return nil, down
		})
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}
