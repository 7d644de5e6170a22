package firstboot

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kiln-project/kiln/contract/netboot"
	"github.com/kiln-project/kiln/firstboot/source"
)

const (
	pinA = "sha256-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

func TestParseServeArgs(t *testing.T) {
	for _, tc := range []struct {
		name, cmdline string
		want          serveArgs
		wantErr       []string // what the error names; nil: no error
	}{
		{"none", "root=live:http://x/rootfs.squashfs ip=dhcp", serveArgs{}, nil},
		{"both", "ip=dhcp kiln.serve.ca=" + pinA + " kiln.serve.url=http://10.0.0.5:8080 quiet",
			serveArgs{URL: "http://10.0.0.5:8080", Pin: pinA}, nil},
		{"url with a slash", "kiln.serve.url=http://10.0.0.5:8080/", serveArgs{URL: "http://10.0.0.5:8080"}, nil},
		{"pin in capitals", "kiln.serve.ca=" + strings.ToUpper(pinA[7:]) + " kiln.serve.ca=" + "sha256-" + strings.ToUpper(pinA[7:]),
			serveArgs{Pin: pinA}, []string{"is not a CA pin"}},
		{"pin too short", "kiln.serve.ca=sha256-0123 kiln.serve.url=http://h:8080",
			serveArgs{URL: "http://h:8080"}, []string{"kiln.serve.ca=sha256-0123 is not a CA pin"}},
		{"pin not hex", "kiln.serve.ca=sha256-" + strings.Repeat("g", 64), serveArgs{}, []string{"is not a CA pin"}},
		{"pin of another digest", "kiln.serve.ca=sha512-" + pinA[7:], serveArgs{}, []string{"is not a CA pin"}},
		{"empty pin", "kiln.serve.ca=", serveArgs{}, []string{"is not a CA pin"}},
		{"https url", "kiln.serve.url=https://h:8443 kiln.serve.ca=" + pinA, serveArgs{Pin: pinA}, []string{"not a plain-HTTP base URL"}},
		{"url with a path", "kiln.serve.url=http://h:8080/x", serveArgs{}, []string{"not a plain-HTTP base URL"}},
		{"url without a host", "kiln.serve.url=http://", serveArgs{}, []string{"not a plain-HTTP base URL"}},
		{"not a url", "kiln.serve.url=10.0.0.5:8080", serveArgs{}, []string{"not a plain-HTTP base URL"}},
		{"a similar name", "kiln.serve.cafe=x kiln.serve.urls=y", serveArgs{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseServeArgs(tc.cmdline)
			if got != tc.want {
				t.Errorf("parseServeArgs(%q) = %+v, want %+v", tc.cmdline, got, tc.want)
			}
			if (err != nil) != (tc.wantErr != nil) {
				t.Fatalf("err = %v, want one naming %q", err, tc.wantErr)
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("err = %v, want it to name %q", err, s)
				}
			}
		})
	}
}

// testCA is a CA that issues serving certificates for 127.0.0.1.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key}
}

func (ca *testCA) pem() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
}

// tlsServer serves "ok" over HTTPS with a certificate ca issued.
func (ca *testCA) tlsServer(t *testing.T) *httptest.Server {
	return ca.tlsServe(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
}

// tlsServe serves h over HTTPS with a certificate ca issued.
func (ca *testCA) tlsServe(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kiln serve"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// caServer serves body at /ca.crt over plain HTTP.
func caServer(t *testing.T, body []byte) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != netboot.CAPath {
			http.NotFound(w, r)
			return
		}
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// pinAgent is an agent whose command line pins pin and names base as
// kiln serve, with a fetcher that gives up on a URL after a second.
func pinAgent(t *testing.T, base, pin string) (*Agent, *bytes.Buffer) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "proc"), 0o755)
	os.WriteFile(filepath.Join(root, "proc/cmdline"), []byte("ip=dhcp kiln.serve.ca="+pin+" kiln.serve.url="+base+"\n"), 0o644)
	var console bytes.Buffer
	a := &Agent{Root: root, Console: &console}
	a.fetcher = source.NewFetcher(nil)
	a.fetcher.Timeout, a.fetcher.Retry = time.Second, 200*time.Millisecond
	a.readServeArgs()
	return a, &console
}

func TestPinnedCA(t *testing.T) {
	siteCA, otherCA := newTestCA(t, "site CA"), newTestCA(t, "another CA")
	pinned, other := siteCA.tlsServer(t), otherCA.tlsServer(t)
	sitePin := netboot.CAPin(siteCA.cert.Raw)
	for _, tc := range []struct {
		name    string
		served  []byte // what /ca.crt serves
		pin     string
		trusted bool     // the pinned server is trusted afterwards
		console []string // what the console says
	}{
		{"match", siteCA.pem(), sitePin, true, []string{"trusting kiln serve's CA site CA (" + sitePin + ")"}},
		{"mismatch", otherCA.pem(), sitePin, false, []string{"refusing kiln serve's CA: the CA certificate from ",
			" is " + netboot.CAPin(otherCA.cert.Raw) + ", but kiln.serve.ca=" + sitePin + ": not trusting it"}},
		{"not a certificate", []byte("hello"), sitePin, false, []string{"no CA from kiln serve: ", "/ca.crt is not a PEM certificate"}},
		{"malformed pin", siteCA.pem(), "sha256-" + sitePin[7:70], false, []string{"kernel command line: kiln.serve.ca=sha256-", " is not a CA pin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, console := pinAgent(t, caServer(t, tc.served), tc.pin)
			before := a.fetcher.Client
			start := time.Now()
			a.trustServeCA(context.Background())
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("trustServeCA took %s", d)
			}
			for _, s := range tc.console {
				if !strings.Contains(console.String(), s) {
					t.Errorf("console:\n%s\nwant %q", console, s)
				}
			}
			if !tc.trusted && a.fetcher.Client != before {
				t.Errorf("the fetcher's client changed: the refusal changed something")
			}
			_, err := a.fetcher.Fetch(context.Background(), pinned.URL+"/config/w1.ign")
			if tc.trusted != (err == nil) {
				t.Errorf("fetch from the pinned CA's server: %v, want trusted %v", err, tc.trusted)
			}
			if _, err := a.fetcher.Fetch(context.Background(), other.URL+"/config/w1.ign"); err == nil {
				t.Errorf("a server of another CA is trusted")
			}
		})
	}
}

// The pinned CA joins the image's bundles and the system roots: none of
// them is dropped.
func TestTrustPoolKeepsTheImageBundles(t *testing.T) {
	siteCA, imageCA := newTestCA(t, "site CA"), newTestCA(t, "image CA")
	images := x509.NewCertPool()
	images.AddCert(imageCA.cert)
	pool := trustPool(images, siteCA.cert)
	for _, ca := range []*testCA{siteCA, imageCA} {
		srv := ca.tlsServer(t)
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Errorf("%s: %v", ca.cert.Subject.CommonName, err)
			continue
		}
		resp.Body.Close()
	}
	if images.Equal(pool) {
		t.Error("trustPool added the CA to the image's pool itself")
	}
}

// fakeServe records the phases reported to /report/<name>.
type fakeServe struct {
	mu     sync.Mutex
	phases []string
	names  []string
}

func (f *fakeServe) start(t *testing.T) string { return f.startWithCA(t, nil) }

// startWithCA serves ca at /ca.crt too.
func (f *fakeServe) startWithCA(t *testing.T, ca []byte) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == netboot.CAPath && ca != nil {
			w.Write(ca)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, netboot.ReportPath)
		var rep struct{ Phase, At string }
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if r.Method != http.MethodPost || !ok || dec.Decode(&rep) != nil || rep.Phase == "" {
			http.Error(w, "bad report", http.StatusBadRequest)
			return
		}
		if _, err := time.Parse(time.RFC3339, rep.At); err != nil {
			http.Error(w, "bad at", http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.phases, f.names = append(f.phases, rep.Phase), append(f.names, name)
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func (f *fakeServe) got() ([]string, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.phases), slices.Clone(f.names)
}

func TestReporter(t *testing.T) {
	var fake fakeServe
	var console bytes.Buffer
	r := newReporter(fake.start(t), func(f string, a ...any) { console.WriteString(f + "\n") })
	r.report("before the name is known")
	r.setName("w1")
	r.report("firstboot: config applied")
	r.wait()
	r.report("firstboot: " + strings.Repeat("x", 300))
	r.wait()
	phases, names := fake.got()
	if len(phases) != 2 || phases[0] != "firstboot: config applied" || len(phases[1]) != 200 || !slices.Equal(names, []string{"w1", "w1"}) {
		t.Errorf("server got %q for %q", phases, names)
	}
	if console.Len() != 0 {
		t.Errorf("console: %s", &console)
	}
	var none *reporter // no kiln.serve.url=
	none.setName("w1")
	none.report("x")
	none.wait()
}

// A server that takes the connection and never answers costs the boot
// nothing: report returns at once, wait within the timeout, and the
// console gets one line for any number of failures.
func TestReporterDeadServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan net.Conn, 16)
	t.Cleanup(func() {
		ln.Close()
		for len(held) > 0 {
			(<-held).Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case held <- c: // kept open, never answered
			default:
				c.Close()
			}
		}
	}()
	var mu sync.Mutex
	var lines []string
	r := newReporter("http://"+ln.Addr().String(), func(f string, a ...any) {
		mu.Lock()
		lines = append(lines, f)
		mu.Unlock()
	})
	r.timeout = 300 * time.Millisecond
	r.setName("w1")
	start := time.Now()
	for range 3 {
		r.report("firstboot: running")
	}
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("report blocked for %s", d)
	}
	r.wait()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("wait took %s, the timeout is %s", d, r.timeout)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != 1 || !strings.Contains(lines[0], "reporting to kiln serve") {
		t.Errorf("console lines %q, want one", lines)
	}
}

// The role reports its state to kiln serve as it writes status.json.
func TestRunRoleReports(t *testing.T) {
	var fake fakeServe
	root := versionRoot(t, "v1.36.4", "v1.37.1", true)
	os.MkdirAll(filepath.Join(root, "proc"), 0o755)
	os.WriteFile(filepath.Join(root, "proc/cmdline"), []byte("kiln.serve.url="+fake.start(t)+"\n"), 0o644)
	var console bytes.Buffer
	if err := RunRole(context.Background(), root, &console, &fakeSys{}, time.Second, "test"); err == nil {
		t.Fatal("RunRole accepted a node file for another Kubernetes release")
	}
	phases, names := fake.got()
	slices.Sort(phases)
	if len(phases) != 2 || !strings.HasPrefix(phases[0], "role worker: error: ") || !strings.Contains(phases[0], "Kubernetes v1.36.4") ||
		phases[1] != "role worker: running" || !slices.Equal(names, []string{"w1", "w1"}) {
		t.Errorf("server got %q for %q", phases, names)
	}
}

// The whole boot: the agent trusts the pinned CA, fetches its config over
// HTTPS from a server of that CA, and reports to kiln serve once the
// applied config names the node.
func TestAgentFetchesOverThePinnedCAAndReports(t *testing.T) {
	siteCA := newTestCA(t, "site CA")
	cfg := `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/hostname","contents":{"source":"data:,w7"}}]}}`
	tlsSrv := siteCA.tlsServe(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/config/w7.ign" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, cfg)
	}))
	var fake fakeServe
	base := fake.startWithCA(t, siteCA.pem())
	root := nodeRoot(t, "")
	cmdline := "console=ttyS0 ignition.config.url=" + tlsSrv.URL + "/config/w7.ign kiln.serve.ca=" + netboot.CAPin(siteCA.cert.Raw) + " kiln.serve.url=" + base + "\n"
	os.WriteFile(filepath.Join(root, "/proc/cmdline"), []byte(cmdline), 0o644)
	out, err, st := runAgent(t, root)
	if err != nil || st.State != "done" || st.Source != "url" {
		t.Fatalf("%v, status %+v\n%s", err, st, out)
	}
	if !strings.Contains(out, "kiln-firstboot: trusting kiln serve's CA site CA (sha256-") {
		t.Errorf("console does not say the CA is trusted:\n%s", out)
	}
	phases, names := fake.got()
	slices.Sort(phases)
	if !slices.Equal(phases, []string{"firstboot: config applied", "firstboot: done"}) || !slices.Equal(names, []string{"w7", "w7"}) {
		t.Errorf("kiln serve got %q for %q", phases, names)
	}
}

func TestRolePhase(t *testing.T) {
	for _, tc := range []struct {
		r    RoleStatus
		want string
	}{
		{RoleStatus{Name: "worker", State: "running"}, "role worker: running"},
		{RoleStatus{Name: "worker", State: "running", Phase: "worker/kubelet"}, "role worker: running worker/kubelet"},
		{RoleStatus{Name: "master", State: "error", Phase: "master/etcd-join", Error: "master/etcd-join: no\nquorum"}, "role master: error: master/etcd-join: no quorum"},
		{RoleStatus{Name: "genesis", State: "done"}, "role genesis: done"},
	} {
		if got := rolePhase(&tc.r); got != tc.want {
			t.Errorf("rolePhase(%+v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}
