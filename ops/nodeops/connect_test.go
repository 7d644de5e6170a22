package nodeops

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/node/clustercheck"
)

// loopbackSite has two masters sharing port, m1 at 127.0.0.1 and m2 at
// 127.0.0.2: written after validation, which refuses loopback addresses.
func loopbackSite(t *testing.T, port int) *site.Site {
	t.Helper()
	s := parseSite(t, fmt.Sprintf(`apiVersion: kiln.dev/v1alpha1
kind: Site
cluster: {name: lab, kubernetesVersion: v1.37.1, podCIDR: 10.244.0.0/16, serviceCIDR: 10.96.0.0/12, apiServerPort: %d}
nodes:
  - {name: m1, role: genesis, macs: ["52:54:00:00:00:11"], installDisk: /dev/vda, network: {address: 10.0.0.11/24, gateway: 10.0.0.1}}
  - {name: m2, role: master, macs: ["52:54:00:00:00:12"], installDisk: /dev/vda, network: {address: 10.0.0.12/24, gateway: 10.0.0.1}}
`, port))
	s.Nodes[0].Network.Address = "127.0.0.1/8"
	s.Nodes[1].Network.Address = "127.0.0.2/8"
	return s
}

// loopbackCluster is loopbackSite with its PKI, and the listener its m2
// serves on.
func loopbackCluster(t *testing.T) (*site.Site, pki.Store, net.Listener, int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2 here: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	s := loopbackSite(t, port)
	st := pki.Store{Dir: t.TempDir()}
	if _, err := st.Ensure(s); err != nil {
		t.Fatal(err)
	}
	return s, st, l, port
}

// ConnectAPI uses admin.kubeconfig as kiln gen writes it: m1 refuses
// the connection, m2's apiserver (its certificate from the PKI, checked
// for the discovery name) answers /readyz with the admin's certificate.
func TestConnectAPITriesEachMaster(t *testing.T) {
	s, st, l, port := loopbackCluster(t)
	srv := apiserver(t, st, l, func(*http.Request) bool { return true })
	defer srv.Close()

	var lines []string
	log := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	kube, err := ConnectAPI(context.Background(), s, st, "", 0, log)
	if err != nil {
		t.Fatalf("ConnectAPI: %v\n%s", err, strings.Join(lines, "\n"))
	}
	if kube == nil || len(lines) != 2 || !strings.Contains(lines[0], "master m1 (https://127.0.0.1:") ||
		!strings.Contains(lines[1], fmt.Sprintf("using master m2 (https://127.0.0.2:%d)", port)) {
		t.Errorf("ConnectAPI said:\n%s", strings.Join(lines, "\n"))
	}

	lines = nil
	if _, err := ConnectAPI(context.Background(), s, st, "m1", 0, log); err != nil || len(lines) != 1 || !strings.Contains(lines[0], "using master m2") {
		t.Errorf("with m1 avoided: %v\n%s", err, strings.Join(lines, "\n"))
	}

	// m2 being removed answers, m1 does not: m2's apiserver stops with
	// its etcd member, so it is not used; m1 is tried again until the
	// bound (here the context's).
	lines = nil
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, err = ConnectAPI(ctx, s, st, "m2", ConnectWait, log)
	if err == nil || !strings.Contains(err.Error(), "removing master m2 needs one") {
		t.Errorf("with only m2, being removed, answering: %v", err)
	}
	if said := strings.Join(lines, "\n"); strings.Contains(said, "using master m2") || !strings.Contains(said, "waiting up to 5m0s for another master than m2") {
		t.Errorf("with only m2, being removed, answering, ConnectAPI said:\n%s", said)
	}

	srv.Close()
	lines = nil
	_, err = ConnectAPI(context.Background(), s, st, "", 0, log)
	if err == nil || !strings.Contains(err.Error(), "no apiserver of the site site.yaml is ready") || !strings.Contains(err.Error(), "master m2") {
		t.Errorf("with no apiserver: %v", err)
	}
}

// apiserver serves /readyz on l with m2's apiserver certificate, asking
// for a client certificate from the cluster CA, as an apiserver does:
// ok when ready says so, else the apiserver's answer with the RBAC
// defaults' hook still running.
func apiserver(t *testing.T, st pki.Store, l net.Listener, ready func(*http.Request) bool) *httptest.Server {
	t.Helper()
	p, err := st.Pair(pki.NodeStem("m2", "apiserver"))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := st.Cert(pki.KubernetesCA.Stem)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || len(r.TLS.PeerCertificates) == 0 || r.TLS.PeerCertificates[0].Subject.CommonName != "kubernetes-admin" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		if !ready(r) {
			http.Error(w, "[+]ping ok\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\nreadyz check failed", http.StatusInternalServerError)
			return
		}
		w.Write([]byte("ok"))
	}))
	srv.Listener.Close()
	srv.Listener = l
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	return srv
}

// After a power cut: m2's apiserver serves, its RBAC defaults' hook
// still running (it answers only /readyz?exclude=<the hook>), and in the
// first rounds not even that. Removing a worker waits through the rounds
// and uses m2; in a one-master site the hook is not left aside.
func TestConnectAPIWaitsAndLeavesTheRBACHookAside(t *testing.T) {
	s, st, l, port := loopbackCluster(t)
	var mu sync.Mutex
	probes := 0
	srv := apiserver(t, st, l, func(r *http.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		probes++
		return probes > 1 && slices.Contains(r.URL.Query()["exclude"], clustercheck.RBACDefaultsHook)
	})
	defer srv.Close()

	var lines []string
	log := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := ConnectAPI(ctx, s, st, "w1", ConnectWait, log); err != nil {
		t.Fatalf("removing a worker: %v\n%s", err, strings.Join(lines, "\n"))
	}
	said := strings.Join(lines, "\n")
	if !strings.Contains(said, "waiting up to 5m0s for a ready apiserver") || !strings.HasSuffix(said, fmt.Sprintf("using master m2 (https://127.0.0.2:%d)", port)) {
		t.Errorf("ConnectAPI said:\n%s", said)
	}

	one := loopbackSite(t, port)
	one.Nodes = one.Nodes[1:]
	one.Nodes[0].Role = "genesis"
	lines = nil
	if _, err := ConnectAPI(context.Background(), one, st, "", 0, log); err == nil || !strings.Contains(err.Error(), "rbac/bootstrap-roles failed") {
		t.Errorf("a one-master site, its hook still running: %v\n%s", err, strings.Join(lines, "\n"))
	}
}

func TestConnectEtcdNeedsTheEtcdClientCertificate(t *testing.T) {
	s := loopbackSite(t, 6443)
	st := pki.Store{Dir: t.TempDir()}
	if _, err := ConnectEtcd(s, st, ""); err == nil || !strings.Contains(err.Error(), "apiserver-etcd-client.crt") {
		t.Errorf("ConnectEtcd with no PKI: %v, want the certificate named", err)
	}
	if _, err := st.Ensure(s); err != nil {
		t.Fatal(err)
	}
	c, err := ConnectEtcd(s, st, "m1")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestByPreferencePutsTheRemovedNodeLast(t *testing.T) {
	s := parseSite(t, testSite)
	var got []string
	for _, m := range byPreference(s, "m1") {
		got = append(got, m.Name)
	}
	if strings.Join(got, ",") != "m2,m3,m1" {
		t.Errorf("order %v", got)
	}
}

func TestCertExpiryIsTheNodesFirst(t *testing.T) {
	s := parseSite(t, testSite)
	st := pki.Store{Dir: t.TempDir()}
	if _, err := st.Ensure(s); err != nil {
		t.Fatal(err)
	}
	for _, n := range s.Nodes {
		got, err := CertExpiry(s, st)(n)
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		if left := time.Until(got); left < 364*24*time.Hour || left > 366*24*time.Hour {
			t.Errorf("%s: first expiry %s, want a year on", n.Name, got)
		}
	}
	if _, err := CertExpiry(s, pki.Store{Dir: t.TempDir()})(s.Nodes[0]); err == nil || !strings.Contains(err.Error(), "kubelet-client.crt") {
		t.Errorf("no PKI: %v, want the file named", err)
	}
}
