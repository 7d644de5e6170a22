package role

import (
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

	"github.com/kiln-project/kiln/clustercheck"
	"github.com/kiln-project/kiln/etcdmember"
	"github.com/kiln-project/kiln/manifests"
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
// the apiserver is written once etcd reads through quorum, the
// controller-manager and scheduler once the apiserver is ready. A wait
// that gives up starts the next pods anyway.
func TestExistingControlPlaneStartsInOrder(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		quorumAfter, readyAfter int // checks that fail first; -1: never
		wantLog                 []string
	}{
		{name: "etcd and the apiserver answer after a while", quorumAfter: 2, readyAfter: 1,
			wantLog: []string{"etcd quorum on 10.0.2.50: after", "started kube-apiserver",
				"apiserver healthy on 10.0.2.50: after", "started kube-controller-manager, kube-scheduler"}},
		{name: "etcd never has quorum", quorumAfter: -1, readyAfter: -1,
			wantLog: []string{"starting kube-apiserver anyway: etcd quorum on 10.0.2.50: gave up after 1s: no leader (1)", "started kube-apiserver",
				"starting kube-controller-manager, kube-scheduler anyway: apiserver healthy on 10.0.2.50: gave up after 1s:", "started kube-controller-manager, kube-scheduler"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := nodeRoot(t, "g1")
			if err := etcdmember.Write(root, etcdmember.Membership{Name: "g1", PeerURL: "https://10.0.2.50:2380", State: etcdmember.StateExisting,
				Peers: []etcdmember.Peer{{Name: "g1", PeerURL: "https://10.0.2.50:2380"}}}); err != nil {
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
				if c := int(readyCalls.Add(1)); tc.readyAfter < 0 || c <= tc.readyAfter {
					http.Error(w, "[-]poststarthook/rbac/bootstrap-roles failed", http.StatusInternalServerError)
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
				APIAt: func(string) (kubernetes.Interface, error) {
					return kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
				}}
			if tc.quorumAfter >= 0 {
				n.Wait = time.Minute
			}
			n.file, n.cat = mustLoad(t, n)
			if err := n.startControlPlane(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(sys.atStart, []string{"etcd"}) || sys.stale {
				t.Errorf("the kubelet started with %v (the last boot's files left: %v), want etcd alone, rendered anew", sys.atStart, sys.stale)
			}
			for _, o := range order {
				if strings.HasPrefix(o, "quorum") && o != "quorum with [etcd]" ||
					strings.HasPrefix(o, "readyz") && o != "readyz with [etcd kube-apiserver]" {
					t.Errorf("%s: out of order (all checks: %q)", o, order)
				}
			}
			if present, stale := podsPresent(root); len(present) != 4 || stale {
				t.Errorf("static pods at the end: %v (the last boot's files left: %v)", present, stale)
			}
			at := 0
			for _, line := range log {
				if at < len(tc.wantLog) && strings.HasPrefix(line, tc.wantLog[at]) {
					at++
				}
			}
			if at < len(tc.wantLog) {
				t.Errorf("console has no %q in order:\n%s", tc.wantLog[at], strings.Join(log, "\n"))
			}
		})
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
	if err := n.startInOrder(ctx, n.params(etcdmember.Genesis("g1", n.file.Address)), stages); err == nil {
		t.Fatal("a cancelled wait returned nil")
	}
	if present, _ := podsPresent(root); slices.Contains(present, "kube-apiserver") {
		t.Errorf("a cancelled boot started the apiserver: %v", present)
	}
}

// Against a real etcd: the quorum check the ordered start waits on fails
// on a member whose cluster has no leader (its peer never started) and
// passes on a member that leads a cluster of one, through the same
// address, port and certificates.
func TestEtcdQuorumOnARealEtcd(t *testing.T) {
	if os.Getenv("KILN_INTEGRATION") != "1" {
		t.Skip("set KILN_INTEGRATION=1 (make integration) to run etcd on the host")
	}
	bin := componentBinaries(t)["etcd"]
	for _, tc := range []struct {
		name    string
		peers   string // the initial cluster beside g1's own peer URL
		quorate bool
	}{
		{name: "two members, one never started", peers: ",g2=http://127.0.0.1:9", quorate: false},
		{name: "one member", quorate: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := nodeRoot(t, "g1")
			n := &Node{Root: root, Log: t.Logf}
			n.file, n.cat = mustLoad(t, n)
			n.file.Address, n.EtcdPort = "127.0.0.1", freePort(t)
			peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
			pki := func(f string) string { return filepath.Join(root, "/etc/kiln/pki", f) }
			client := fmt.Sprintf("https://127.0.0.1:%d", n.EtcdPort)
			start(t, "etcd", bin, "--name", "g1", "--data-dir", filepath.Join(t.TempDir(), "etcd"),
				"--listen-client-urls", client, "--advertise-client-urls", client,
				"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
				"--initial-cluster", "g1="+peer+tc.peers, "--listen-metrics-urls", "http://127.0.0.1:0",
				"--cert-file", pki("etcd-server.crt"), "--key-file", pki("etcd-server.key"), "--trusted-ca-file", pki("etcd/ca.crt"), "--client-cert-auth")
			quorum, closeEtcd, err := n.ownEtcdQuorum()
			if err != nil {
				t.Fatal(err)
			}
			defer closeEtcd()
			bound := 20 * time.Second
			if tc.quorate {
				bound = time.Minute
			}
			err = clustercheck.Wait(context.Background(), "etcd quorum", bound, t.Logf, quorum)
			if tc.quorate && err != nil {
				t.Fatalf("a cluster of one: %v", err)
			}
			if !tc.quorate && err == nil {
				t.Fatal("a member without a leader passed the quorum check")
			}
		})
	}
}
