package role

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kiln-project/kiln/builder/realbin"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// podsPresent lists which of the control plane's static pods are in the
// kubelet's directory, and whether any still holds the last boot's file.
func podsPresent(root string) (present []string, stale bool) {
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		b, err := os.ReadFile(filepath.Join(root, manifests.StaticPodDir, name+".yaml"))
		if err == nil {
			present = append(present, name)
			stale = stale || string(b) == "last boot's"
		}
	}
	return present, stale
}

// kubeletWatcher records which static pods were there when the kubelet
// was started.
type kubeletWatcher struct {
	root    string
	atStart []string
	stale   bool
}

func (k *kubeletWatcher) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	if name+" "+strings.Join(args, " ") == "systemctl start --no-block kubelet.service" {
		k.atStart, k.stale = podsPresent(k.root)
	}
	return nil, nil
}

// A control plane that existed before this boot (its etcd membership is
// recorded as existing) comes back in order: the kubelet starts with etcd
// alone, even when the last boot left every static pod in its directory;
// the apiserver is written once etcd reads through quorum (here g1's
// member leads, so it is g1's turn), the controller-manager and scheduler
// once the apiserver is ready. A wait that gives up starts the next pods
// anyway.
func TestExistingControlPlaneStartsInOrder(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		quorumAfter, readyAfter int                 // checks that fail first; -1: never
		pending                 string              // the readiness check that fails; "" is etcd
		alone                   bool                // the site names no other master
		peered                  bool                // the membership record has m2 beside g1 (a join, a multi-master restart)
		members                 []etcdmember.Member // what etcd lists once it has quorum; nil: not asked
		wantLog                 []string
	}{
		{name: "etcd and the apiserver answer after a while", quorumAfter: 2, readyAfter: 1,
			wantLog: []string{"etcd quorum on 10.0.2.50: after", "the apiserver's turn on 10.0.2.50", "started kube-apiserver",
				"apiserver healthy on 10.0.2.50: after", "started kube-controller-manager, kube-scheduler"}},
		{name: "etcd never has quorum", quorumAfter: -1, readyAfter: -1,
			wantLog: []string{"going on: etcd quorum on 10.0.2.50: gave up after 1s: no leader (1)",
				"starting kube-apiserver anyway: the apiserver's turn on 10.0.2.50", "started kube-apiserver",
				"starting kube-controller-manager, kube-scheduler anyway: apiserver healthy on 10.0.2.50: gave up after 1s:", "started kube-controller-manager, kube-scheduler"}},
		{name: "only the RBAC defaults' hook pending beside another etcd member: the cluster has them", quorumAfter: 0, readyAfter: -1, pending: clustercheck.RBACDefaultsHook, peered: true,
			wantLog: []string{"etcd quorum on 10.0.2.50: after", "started kube-apiserver",
				"apiserver healthy on 10.0.2.50: after", "started kube-controller-manager, kube-scheduler"}},
		{name: "the RBAC defaults' hook pending on genesis, whose record names it alone, beside a joined master: the cluster has them", quorumAfter: 0, readyAfter: -1, pending: clustercheck.RBACDefaultsHook,
			members: []etcdmember.Member{{Name: "g1"}, {Name: "m2"}},
			wantLog: []string{"etcd has 2 voting members (the membership record names 1): this apiserver starts beside the cluster's RBAC defaults",
				"etcd quorum on 10.0.2.50: after", "started kube-apiserver", "apiserver healthy on 10.0.2.50: after", "started kube-controller-manager, kube-scheduler"}},
		{name: "the RBAC defaults' hook pending beside a learner only: waited for", quorumAfter: 0, readyAfter: -1, pending: clustercheck.RBACDefaultsHook,
			members: []etcdmember.Member{{Name: "g1"}, {IsLearner: true}},
			wantLog: []string{"etcd quorum on 10.0.2.50: after", "started kube-apiserver",
				"starting kube-controller-manager, kube-scheduler anyway: apiserver healthy on 10.0.2.50: gave up after"}},
		{name: "only the RBAC defaults' hook pending on a lone member: waited for", quorumAfter: 0, readyAfter: -1, pending: clustercheck.RBACDefaultsHook,
			wantLog: []string{"etcd quorum on 10.0.2.50: after", "started kube-apiserver",
				"starting kube-controller-manager, kube-scheduler anyway: apiserver healthy on 10.0.2.50: gave up after"}},
		{name: "the only master: the apiserver starts beside etcd", quorumAfter: 2, readyAfter: 1, alone: true,
			wantLog: []string{"the only master of this site: kube-apiserver starts beside etcd", "etcd quorum on 10.0.2.50: after",
				"apiserver healthy on 10.0.2.50: after", "started kube-controller-manager, kube-scheduler"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := nodeRoot(t, "g1")
			peers := []etcdmember.Peer{{Name: "g1", PeerURL: "https://10.0.2.50:2380"}}
			if tc.peered {
				peers = append(peers, etcdmember.Peer{Name: "m2", PeerURL: "https://10.0.2.51:2380"})
			}
			if err := etcdmember.Write(root, etcdmember.Membership{Name: "g1", PeerURL: "https://10.0.2.50:2380", State: etcdmember.StateExisting,
				Peers: peers}); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(root, manifests.StaticPodDir)
			os.MkdirAll(dir, 0o755)
			for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
				os.WriteFile(filepath.Join(dir, name+".yaml"), []byte("last boot's"), 0o644)
			}
			var quorumCalls, readyCalls atomic.Int32
			var order []string
			note := func(what string) {
				present, _ := podsPresent(root)
				order = append(order, fmt.Sprintf("%s with %v", what, present))
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/readyz" {
					http.NotFound(w, r)
					return
				}
				note("readyz")
				pending := cmp.Or(tc.pending, "etcd")
				if c := int(readyCalls.Add(1)); (tc.readyAfter < 0 || c <= tc.readyAfter) && !slices.Contains(r.URL.Query()["exclude"], pending) {
					http.Error(w, "[-]"+pending+" failed", http.StatusInternalServerError)
					return
				}
				fmt.Fprint(w, "ok")
			}))
			defer srv.Close()
			sys := &kubeletWatcher{root: root}
			var log []string
			n := &Node{Root: root, Sys: sys, Wait: time.Second, Log: func(f string, a ...any) { log = append(log, fmt.Sprintf(f, a...)) },
				EtcdQuorum: func(context.Context) error {
					note("quorum")
					if c := int(quorumCalls.Add(1)); tc.quorumAfter < 0 || c <= tc.quorumAfter {
						return fmt.Errorf("no leader (%d)", c)
					}
					return nil
				},
				EtcdLeads: func(context.Context) (bool, error) {
					if tc.quorumAfter < 0 {
						return false, errors.New("no leader")
					}
					return true, nil
				},
				APIAt: func(address string) (kubernetes.Interface, error) {
					if address != "10.0.2.50" {
						return kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"}) // m2: refused
					}
					return kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
				}}
			if tc.members != nil {
				n.EtcdMembers = func(context.Context) ([]etcdmember.Member, error) { return tc.members, nil }
			}
			if tc.quorumAfter >= 0 && tc.readyAfter >= 0 { // a wait that gives up does so in a second
				n.Wait = time.Minute
			}
			n.file, n.cat = mustLoad(t, n)
			atStart, quorumWith := []string{"etcd"}, "quorum with [etcd]"
			if tc.alone {
				n.file.Masters = n.file.Masters[:1]
				atStart, quorumWith = []string{"etcd", "kube-apiserver"}, "quorum with [etcd kube-apiserver]"
			}
			if err := n.units().plane.start(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(sys.atStart, atStart) || sys.stale {
				t.Errorf("the kubelet started with %v (the last boot's files left: %v), want %v, rendered anew", sys.atStart, sys.stale, atStart)
			}
			for _, o := range order {
				if strings.HasPrefix(o, "quorum") && o != quorumWith ||
					strings.HasPrefix(o, "readyz") && o != "readyz with [etcd kube-apiserver]" {
					t.Errorf("%s: out of order (all checks: %q)", o, order)
				}
			}
			if present, stale := podsPresent(root); len(present) != 4 || stale {
				t.Errorf("static pods at the end: %v (the last boot's files left: %v)", present, stale)
			}
			wantInOrder(t, log, tc.wantLog)
		})
	}
}

// After a power cut the masters take turns: the one whose etcd member
// leads starts its apiserver at once; another waits until an apiserver of
// another master is ready, or until its turn's bound has passed (the
// node's Wait here, 5 min at most), and then starts its own anyway.
func TestAPIServerWaitsForItsTurn(t *testing.T) {
	for _, tc := range []struct {
		name      string
		leads     func(context.Context) (bool, error)
		m2Pending string // the readiness check m2's apiserver fails; "" is none
		wantLog   []string
	}{
		{name: "the etcd leader's node starts first", leads: func(context.Context) (bool, error) { return true, nil },
			wantLog: []string{"the apiserver's turn on 10.0.2.50", "started kube-apiserver"}},
		{name: "a follower starts once m2's apiserver is ready", leads: func(context.Context) (bool, error) { return false, nil },
			wantLog: []string{"master m2's apiserver is ready: starting this one", "the apiserver's turn on 10.0.2.50", "started kube-apiserver"}},
		{name: "m2's RBAC defaults' hook pending is m2 ready", leads: func(context.Context) (bool, error) { return false, nil }, m2Pending: clustercheck.RBACDefaultsHook,
			wantLog: []string{"master m2's apiserver is ready: starting this one", "started kube-apiserver"}},
		{name: "a follower with no apiserver ready starts anyway", leads: func(context.Context) (bool, error) { return false, nil }, m2Pending: "etcd",
			wantLog: []string{"starting kube-apiserver anyway: the apiserver's turn on 10.0.2.50 (the etcd leader's master starts first, the others once an apiserver is ready): gave up after 1s: this member does not lead etcd, and no other master's apiserver is ready (master m2 (10.0.2.51): ",
				"started kube-apiserver"}},
		{name: "the leader unknown", leads: func(context.Context) (bool, error) { return false, errors.New("status: deadline exceeded") }, m2Pending: "etcd",
			wantLog: []string{"gave up after 1s: the etcd leader unknown: status: deadline exceeded, and no other master's apiserver is ready", "started kube-apiserver"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := nodeRoot(t, "g1")
			if err := etcdmember.Write(root, etcdmember.Membership{Name: "g1", PeerURL: "https://10.0.2.50:2380", State: etcdmember.StateExisting,
				Peers: []etcdmember.Peer{{Name: "g1", PeerURL: "https://10.0.2.50:2380"}, {Name: "m2", PeerURL: "https://10.0.2.51:2380"}}}); err != nil {
				t.Fatal(err)
			}
			ready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
			defer ready.Close()
			var m2Asked atomic.Int32
			m2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				m2Asked.Add(1)
				if tc.m2Pending != "" && !slices.Contains(r.URL.Query()["exclude"], tc.m2Pending) {
					http.Error(w, "[-]"+tc.m2Pending+" failed", http.StatusInternalServerError)
					return
				}
				fmt.Fprint(w, "ok")
			}))
			defer m2.Close()
			var log []string
			n := &Node{Root: root, Sys: &recorder{}, Wait: time.Second, Log: func(f string, a ...any) { log = append(log, fmt.Sprintf(f, a...)) },
				EtcdQuorum: func(context.Context) error { return nil }, EtcdLeads: tc.leads,
				APIAt: func(address string) (kubernetes.Interface, error) {
					if address == "10.0.2.51" {
						return kubernetes.NewForConfig(&rest.Config{Host: m2.URL})
					}
					return kubernetes.NewForConfig(&rest.Config{Host: ready.URL})
				}}
			n.file, n.cat = mustLoad(t, n)
			if err := n.units().plane.start(context.Background()); err != nil {
				t.Fatal(err)
			}
			lead, _ := tc.leads(context.Background())
			if lead && m2Asked.Load() > 0 {
				t.Errorf("the etcd leader's node asked m2's apiserver %d times before starting its own", m2Asked.Load())
			}
			wantInOrder(t, log, tc.wantLog)
		})
	}
}

// wantInOrder fails t unless log has a line containing each of want, in
// that order.
func wantInOrder(t *testing.T, log, want []string) {
	t.Helper()
	at := 0
	for _, line := range log {
		if at < len(want) && strings.Contains(line, want[at]) {
			at++
		}
	}
	if at < len(want) {
		t.Errorf("console has no %q in order:\n%s", want[at], strings.Join(log, "\n"))
	}
}

// A cancelled boot stops at the wait: nothing is started after it.
func TestStartInOrderStopsWhenTheBootIsCancelled(t *testing.T) {
	root, _ := nodeRoot(t, "g1")
	n := &Node{Root: root, Sys: &recorder{}, Wait: time.Minute, Log: t.Logf}
	n.file, n.cat = mustLoad(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	stages := []stage{{waitFor: "something", pods: []string{"kube-apiserver"}, ready: func(context.Context) error {
		cancel()
		return errors.New("not yet")
	}}}
	if err := n.units().plane.startInOrder(ctx, n.units().env.params(etcdmember.Genesis("g1", n.file.Address)), stages); err == nil {
		t.Fatal("a cancelled wait returned nil")
	}
	if present, _ := podsPresent(root); slices.Contains(present, "kube-apiserver") {
		t.Errorf("a cancelled boot started the apiserver: %v", present)
	}
}

// Against a real etcd: the checks the ordered start waits on. The quorum
// check fails on a member whose cluster has no leader (its peer never
// started), and that member's leader is unknown; a member that leads a
// cluster of one passes both; of three members, every one reads through
// quorum and exactly one leads. Through the same addresses, ports and
// certificates a node uses.
func TestEtcdQuorumOnARealEtcd(t *testing.T) {
	if os.Getenv("KILN_INTEGRATION") != "1" {
		t.Skip("set KILN_INTEGRATION=1 (make integration) to run etcd on the host")
	}
	bin := realbin.Etcd(t)
	for _, tc := range []struct {
		name    string
		members int
		missing bool // a second member in the initial cluster that never starts
		quorate bool
	}{
		{name: "two members, one never started", members: 1, missing: true},
		{name: "one member", members: 1, quorate: true},
		{name: "three members", members: 3, quorate: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := nodeRoot(t, "g1")
			var nodes []*Node
			var initial []string
			peers := map[string]string{}
			for i := range tc.members {
				n := &Node{Root: root, Log: t.Logf}
				n.file, n.cat = mustLoad(t, n)
				n.file.Address, n.EtcdPort = "127.0.0.1", freePort(t)
				nodes = append(nodes, n)
				name := fmt.Sprintf("e%d", i+1)
				peers[name] = fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
				initial = append(initial, name+"="+peers[name])
			}
			if tc.missing {
				initial = append(initial, "e9=http://127.0.0.1:9")
			}
			pki := func(f string) string { return filepath.Join(root, "/etc/kiln/pki", f) }
			for i, n := range nodes {
				name := fmt.Sprintf("e%d", i+1)
				client := fmt.Sprintf("https://127.0.0.1:%d", n.EtcdPort)
				realbin.Start(t, "etcd-"+name, bin, "--name", name, "--data-dir", filepath.Join(t.TempDir(), "etcd"),
					"--listen-client-urls", client, "--advertise-client-urls", client,
					"--listen-peer-urls", peers[name], "--initial-advertise-peer-urls", peers[name],
					"--initial-cluster", strings.Join(initial, ","), "--listen-metrics-urls", "http://127.0.0.1:0",
					"--cert-file", pki("etcd-server.crt"), "--key-file", pki("etcd-server.key"), "--trusted-ca-file", pki("etcd/ca.crt"), "--client-cert-auth")
			}
			leaders := 0
			for i, n := range nodes {
				etcd, closeEtcd, err := n.units().plane.ownEtcd()
				if err != nil {
					t.Fatal(err)
				}
				defer closeEtcd()
				bound := 20 * time.Second
				if tc.quorate {
					bound = time.Minute
				}
				err = retry.Wait(context.Background(), fmt.Sprintf("etcd quorum on e%d", i+1), bound, t.Logf, etcd.quorum)
				if tc.quorate && err != nil {
					t.Fatalf("a quorate cluster: %v", err)
				}
				if !tc.quorate && err == nil {
					t.Fatal("a member without a leader passed the quorum check")
				}
				lead, err := etcd.leads(context.Background())
				switch {
				case !tc.quorate && err == nil:
					t.Errorf("e%d: a member without a leader: leads %t, want an error", i+1, lead)
				case tc.quorate && err != nil:
					t.Errorf("e%d: %v", i+1, err)
				case lead:
					leaders++
				}
			}
			if want := map[bool]int{true: 1}[tc.quorate]; leaders != want {
				t.Errorf("%d members lead, want %d", leaders, want)
			}
		})
	}
}

// A master beside other etcd members (a join, a multi-master restart)
// leaves the RBAC defaults' hook out of its readiness; a lone control
// plane waits for all of it.
func TestRBACHookAside(t *testing.T) {
	for _, peers := range []bool{false, true} {
		cp := &controlPlane{etcdPeers: peers}
		if got := cp.rbacAside(); slices.Contains(got, clustercheck.RBACDefaultsHook) != peers {
			t.Errorf("beside other etcd members %v: checks aside %v", peers, got)
		}
	}
}
