package serve

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kiln-project/kiln/contract/netboot"
	"github.com/kiln-project/kiln/gen/nodeconfig"
	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/ignition"
)

// The example site: m1 genesis, m2 and m3 masters, w1 and w2 workers
// (w2 with two MACs), cluster "lab".
const exampleSite = "../../examples/site.yaml"

var (
	fixtureOnce sync.Once
	fixture     struct {
		site            *site.Site
		siteDir, pkiDir string
		err             error
		root            string
	}
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.root != "" {
		os.RemoveAll(fixture.root)
	}
	os.Exit(code)
}

// generated is the example site with its PKI and configs, made once the
// way kiln gen makes them.
func generated(t *testing.T) (*site.Site, string, string) {
	t.Helper()
	fixtureOnce.Do(func() {
		f := &fixture
		if f.root, f.err = os.MkdirTemp("", "kiln-serve-test"); f.err != nil {
			return
		}
		if f.site, f.err = site.Load(exampleSite); f.err != nil {
			return
		}
		f.pkiDir, f.siteDir = filepath.Join(f.root, "pki"), filepath.Join(f.root, "site")
		_, f.err = nodeconfig.Generate(f.site, pki.Store{Dir: f.pkiDir}, f.siteDir)
	})
	if fixture.err != nil {
		t.Fatal(fixture.err)
	}
	return fixture.site, fixture.siteDir, fixture.pkiDir
}

// makeImage writes a fake kiln build: the PXE set, a boot.ipxe as the
// builder writes it with the spec's extra arguments, and the manifest.
func makeImage(t *testing.T, tag string, extra ...string) string {
	t.Helper()
	dir := t.TempDir()
	pxe := filepath.Join(dir, netboot.PXEDir)
	os.MkdirAll(pxe, 0o755)
	script := fmt.Sprintf("#!ipxe\nisset ${base-url} || set base-url tftp://${next-server}\nkernel ${base-url}/vmlinuz %s ${kiln-args}\ninitrd ${base-url}/initrd.img\nboot\n",
		strings.Join(append(netboot.PXECmdline("${base-url}"), extra...), " "))
	files := map[string][]byte{
		netboot.Kernel: []byte("kernel " + tag),
		netboot.Initrd: []byte("initrd " + tag),
		netboot.Rootfs: bytes.Repeat([]byte("squashfs "+tag+"\n"), 1000),
		netboot.Script: []byte(script),
	}
	m := manifest{Name: "node"}
	for _, name := range []string{netboot.Kernel, netboot.Initrd, netboot.Rootfs, netboot.Script} {
		if err := os.WriteFile(filepath.Join(pxe, name), files[name], 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(files[name])
		m.Artifacts = append(m.Artifacts, netboot.FileDigest{Path: netboot.PXEDir + "/" + name, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(files[name]))})
	}
	data, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, netboot.ManifestName), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fakeNeighbours answers every address with one settable MAC.
type fakeNeighbours struct {
	mu  sync.Mutex
	mac string
}

func (f *fakeNeighbours) set(mac string) { f.mu.Lock(); f.mac = mac; f.mu.Unlock() }

func (f *fakeNeighbours) MAC(ip netip.Addr) (net.HardwareAddr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mac == "" {
		return nil, errors.New("not in the table")
	}
	return net.ParseMAC(f.mac)
}

// running is a started server and what the test needs to talk to it.
type running struct {
	*Server
	base, tlsBase string
	log           *syncBuffer
	arp           *fakeNeighbours
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// config is a Config for the example site on 127.0.0.1's free ports.
func config(t *testing.T) Config {
	s, siteDir, pkiDir := generated(t)
	return Config{Site: s, SiteDir: siteDir, Image: makeImage(t, "v1", "quiet"), PKI: pkiDir,
		Listen: "127.0.0.1:0", TLSListen: "127.0.0.1:0", TLSHosts: []string{"127.0.0.1", "localhost"}}
}

// start runs a server on cfg until the test ends.
func start(t *testing.T, cfg Config) *running {
	t.Helper()
	r := &running{log: &syncBuffer{}, arp: &fakeNeighbours{}}
	cfg.Log, cfg.Neighbours = r.log, r.arp
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	r.Server = srv
	r.base = "http://" + srv.Addr().String()
	if a := srv.TLSAddr(); a != nil {
		r.tlsBase = "https://" + a.String()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return r
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func post(t *testing.T, c *http.Client, url, body string) (int, string) {
	t.Helper()
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func configHash(t *testing.T, name string) string {
	_, siteDir, _ := generated(t)
	data, err := os.ReadFile(filepath.Join(siteDir, nodeconfig.NodesDir, name+".ign"))
	if err != nil {
		t.Fatal(err)
	}
	return ignition.Hash(data)
}

// caPin is the pin of the site's CA, computed here from pki/ca.crt.
func caPin(t *testing.T, pkiDir string) (string, *x509.CertPool) {
	data, err := os.ReadFile(filepath.Join(pkiDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	sum := sha256.Sum256(block.Bytes)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(data)
	return "sha256-" + hex.EncodeToString(sum[:]), pool
}

func TestBootScriptChainsByMACAndUUID(t *testing.T) {
	r := start(t, config(t))
	code, body := get(t, nil, r.base+"/boot.ipxe")
	want := "chain " + r.base + "/ipxe?mac=${mac:hexhyp}&uuid=${uuid}\n"
	if code != 200 || !strings.HasPrefix(body, "#!ipxe\n") || !strings.Contains(body, want) {
		t.Fatalf("GET /boot.ipxe = %d\n%s\nwant a script with %q", code, body, want)
	}
}

func TestNodeScriptPicksTheNodeByMAC(t *testing.T) {
	cfg := config(t)
	r := start(t, cfg)
	_, _, pkiDir := generated(t)
	pin, _ := caPin(t, pkiDir)
	for _, c := range []struct{ mac, node string }{
		{"52-54-00-10-00-21", "w1"}, // iPXE's ${mac:hexhyp}
		{"52:54:00:10:00:21", "w1"},
		{"52-54-00-10-00-11", "m1"},
		{"52-54-00-10-01-22", "w2"}, // w2's second NIC
		{"52:54:00:10:00:22", "w2"},
		{"52-54-00-10-00-1A", ""}, // not in the site
		{"", ""},
		{"zz", ""},
	} {
		t.Run(c.mac+"="+c.node, func(t *testing.T) {
			for _, mac := range []string{c.mac, strings.ToUpper(c.mac), strings.ToLower(c.mac)} {
				code, body := get(t, nil, r.base+"/ipxe?mac="+mac+"&uuid=4c4c4544-0000-1000-8000-000000000001")
				if code != 200 || !strings.HasPrefix(body, "#!ipxe\n") {
					t.Fatalf("GET /ipxe?mac=%s = %d\n%s", mac, code, body)
				}
				if c.node == "" {
					if want := "echo kiln: no node in site lab has MAC " + mac + " or UUID 4c4c4544-0000-1000-8000-000000000001\n"; !strings.Contains(body, want) {
						t.Errorf("unknown MAC %q: script\n%s\nwant %q", mac, body, want)
					}
					if strings.Contains(body, "kernel") || strings.Contains(body, "boot") && !strings.Contains(body, "boots nothing") {
						t.Errorf("unknown MAC %q: the script boots something:\n%s", mac, body)
					}
					if !strings.Contains(r.log.String(), "no node in site lab has MAC "+mac) {
						t.Errorf("no log line for unknown MAC %q:\n%s", mac, r.log)
					}
					continue
				}
				img := r.base + "/image/" + r.nodeImage(c.node)
				wantArgs := append(netboot.PXECmdline(img), "quiet",
					"ignition.config.url="+r.tlsBase+"/config/"+c.node+".ign",
					"kiln.config.hash="+configHash(t, c.node),
					"kiln.rootfs.hash="+r.rootfsHash(t, cfg.Image),
					"kiln.serve.ca="+pin,
					"kiln.serve.url="+r.base)
				kernel := "kernel " + img + "/vmlinuz " + strings.Join(wantArgs, " ") + "\n"
				if !strings.Contains(body, kernel) || !strings.Contains(body, "initrd "+img+"/initrd.img\nboot\n") {
					t.Errorf("MAC %s: script\n%s\nwant kernel line\n%s", mac, body, kernel)
				}
				if !strings.Contains(body, "node "+c.node+" ") {
					t.Errorf("MAC %s: script does not name node %s:\n%s", mac, c.node, body)
				}
			}
		})
	}
}

func (r *running) nodeImage(name string) string { return r.byName[name].image.pin }

func (r *running) rootfsHash(t *testing.T, dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, netboot.PXEDir, netboot.Rootfs))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return "sha256-" + hex.EncodeToString(sum[:])
}

// tlsClient trusts only the site's CA and presents the pair at stem, if
// any.
func tlsClient(t *testing.T, pkiDir, stem string) *http.Client {
	_, pool := caPin(t, pkiDir)
	cfg := &tls.Config{RootCAs: pool}
	if stem != "" {
		cert, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, stem+".crt"), filepath.Join(pkiDir, stem+".key"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
}

func TestArming(t *testing.T) {
	_, _, pkiDir := generated(t)
	admin := tlsClient(t, pkiDir, pki.AdminStem)
	const m1MAC, m2MAC, w1MAC = "52:54:00:10:00:11", "52:54:00:10:00:12", "52:54:00:10:00:21"
	type step struct {
		arm      string // POST /arm/<arm> as admin first
		mac      string // the requester's MAC in the ARP table
		get      string // then GET /config/<get>.ign
		want     int
		wantBody string
		wantLog  string
	}
	for _, c := range []struct {
		name  string
		armed []string
		steps []step
	}{
		{"a worker's config always", nil, []step{
			{get: "w1", mac: w1MAC, want: 200},
			{get: "w1", mac: m1MAC, want: 200},
			{get: "w1", want: 200},
		}},
		{"not armed", nil, []step{
			{get: "m1", mac: m1MAC, want: 403, wantBody: "m1 is not armed", wantLog: "refused m1.ign to 127.0.0.1: m1 is not armed"},
		}},
		{"once per arming", []string{"m1"}, []step{
			{get: "m1", mac: m1MAC, want: 200, wantLog: "delivered m1.ign to 127.0.0.1"},
			{get: "m1", mac: m1MAC, want: 403, wantLog: "refused m1.ign to 127.0.0.1: already delivered at "},
		}},
		{"wrong MAC does not use the arming up", []string{"m1"}, []step{
			{get: "m1", mac: m2MAC, want: 403, wantLog: "refused m1.ign to 127.0.0.1: its MAC is " + m2MAC},
			{get: "m1", want: 403, wantLog: "its MAC is unknown"},
			{get: "m1", mac: m1MAC, want: 200},
		}},
		{"arming one node arms no other", []string{"m1"}, []step{
			{get: "m2", mac: m2MAC, want: 403, wantBody: "m2 is not armed"},
		}},
		{"re-arm over HTTPS", []string{"m1"}, []step{
			{get: "m1", mac: m1MAC, want: 200},
			{get: "m1", mac: m1MAC, want: 403},
			{arm: "m1", get: "m1", mac: m1MAC, want: 200, wantLog: "m1 armed by kubernetes-admin"},
			{get: "m1", mac: m1MAC, want: 403, wantBody: "already delivered at"},
			{arm: "m2", get: "m2", mac: m2MAC, want: 200},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config(t)
			cfg.Arm = c.armed
			r := start(t, cfg)
			for i, s := range c.steps {
				if s.arm != "" {
					if code, body := post(t, admin, r.tlsBase+"/arm/"+s.arm, ""); code != 200 {
						t.Fatalf("step %d: POST /arm/%s = %d %s", i, s.arm, code, body)
					}
				}
				r.arp.set(s.mac)
				code, body := get(t, nil, r.base+"/config/"+s.get+".ign")
				if code != s.want || !strings.Contains(body, s.wantBody) {
					t.Fatalf("step %d: GET /config/%s.ign from MAC %q = %d\n%.200s\nwant %d with %q", i, s.get, s.mac, code, body, s.want, s.wantBody)
				}
				if code == 200 && ignition.Hash([]byte(body)) != configHash(t, s.get) {
					t.Errorf("step %d: served config is not %s's", i, s.get)
				}
				if !strings.Contains(r.log.String(), s.wantLog) {
					t.Errorf("step %d: log\n%s\nwant %q", i, r.log, s.wantLog)
				}
			}
		})
	}
}

func TestOnlyTheAdminCertificateArms(t *testing.T) {
	_, _, pkiDir := generated(t)
	r := start(t, config(t))
	for _, c := range []struct {
		name   string
		client *http.Client
		url    string
		want   int
	}{
		{"admin over HTTPS", tlsClient(t, pkiDir, pki.AdminStem), r.tlsBase + "/arm/m2", 200},
		{"no client certificate", tlsClient(t, pkiDir, ""), r.tlsBase + "/arm/m2", 403},
		{"a worker's kubelet certificate", tlsClient(t, pkiDir, pki.NodeStem("w1", "kubelet-client")), r.tlsBase + "/arm/m2", 403},
		{"a master's agent certificate", tlsClient(t, pkiDir, pki.NodeStem("m1", "agent")), r.tlsBase + "/arm/m2", 403},
		{"plain HTTP", nil, r.base + "/arm/m2", 403},
		{"a worker", tlsClient(t, pkiDir, pki.AdminStem), r.tlsBase + "/arm/w1", 400},
		{"no such node", tlsClient(t, pkiDir, pki.AdminStem), r.tlsBase + "/arm/m9", 404},
	} {
		t.Run(c.name, func(t *testing.T) {
			if code, body := post(t, c.client, c.url, ""); code != c.want {
				t.Errorf("POST %s = %d %s, want %d", c.url, code, body, c.want)
			}
		})
	}
	if got := r.Armed(); len(got) != 1 || got[0] != "m2" {
		t.Errorf("armed = %v, want [m2]", got)
	}
}

func TestTLSCertificateChainsToTheSiteCAAndTheScriptPinsIt(t *testing.T) {
	_, _, pkiDir := generated(t)
	r := start(t, config(t))
	pin, pool := caPin(t, pkiDir)
	conn, err := tls.Dial("tcp", r.TLSAddr().String(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("TLS to the server, trusting only %s/ca.crt: %v", pkiDir, err)
	}
	st := conn.ConnectionState()
	conn.Close()
	chain := st.VerifiedChains[0]
	if root := chain[len(chain)-1]; netboot.CAPin(root.Raw) != pin {
		t.Errorf("chain ends at %s, not the site's CA", root.Subject)
	}
	if r.CAPin() != pin {
		t.Errorf("CAPin() = %s, want %s", r.CAPin(), pin)
	}
	code, body := get(t, tlsClient(t, pkiDir, ""), r.tlsBase+"/ipxe?mac=52-54-00-10-00-21")
	if code != 200 || !strings.Contains(body, " kiln.serve.ca="+pin) {
		t.Errorf("script over HTTPS = %d\n%s\nwant kiln.serve.ca=%s", code, body, pin)
	}
	if !strings.Contains(body, "kernel "+r.tlsBase+"/image/") {
		t.Errorf("script over HTTPS does not boot from the HTTPS listener:\n%s", body)
	}
	if !strings.Contains(body, " kiln.serve.url="+r.base+"\n") {
		t.Errorf("script over HTTPS: want kiln.serve.url=%s (the plain listener):\n%s", r.base, body)
	}
}

// The CA at /ca.crt, on either listener, is the one the script pins.
func TestCACertIsThePinnedCA(t *testing.T) {
	_, _, pkiDir := generated(t)
	r := start(t, config(t))
	pin, _ := caPin(t, pkiDir)
	_, script := get(t, nil, r.base+"/ipxe?mac=52-54-00-10-00-21")
	if !strings.Contains(script, " kiln.serve.ca="+pin) {
		t.Fatalf("script does not pin %s:\n%s", pin, script)
	}
	for _, url := range []string{r.base + "/ca.crt", r.tlsBase + "/ca.crt"} {
		code, body := get(t, tlsClient(t, pkiDir, ""), url)
		block, rest := pem.Decode([]byte(body))
		if code != 200 || block == nil || block.Type != "CERTIFICATE" || len(strings.TrimSpace(string(rest))) != 0 {
			t.Fatalf("GET %s = %d\n%s\nwant one PEM certificate", url, code, body)
		}
		if got := netboot.CAPin(block.Bytes); got != pin {
			t.Errorf("GET %s: a CA whose pin is %s, the script pins %s", url, got, pin)
		}
	}
}

func TestNoCAKeyServesPlainHTTPOnly(t *testing.T) {
	_, _, pkiDir := generated(t)
	cfg := config(t)
	cfg.PKI = t.TempDir()
	data, _ := os.ReadFile(filepath.Join(pkiDir, "ca.crt"))
	os.WriteFile(filepath.Join(cfg.PKI, "ca.crt"), data, 0o644)
	r := start(t, cfg)
	if ok, why := r.TLS(); ok || why != "no CA key" || r.TLSAddr() != nil {
		t.Errorf("TLS() = %v, %q with no ca.key; TLSAddr %v", ok, why, r.TLSAddr())
	}
	_, body := get(t, nil, r.base+"/ipxe?mac=52-54-00-10-00-21")
	if strings.Contains(body, "kiln.serve.ca=") || !strings.Contains(body, "ignition.config.url="+r.base+"/config/w1.ign") ||
		!strings.Contains(body, " kiln.serve.url="+r.base) {
		t.Errorf("plain-only script:\n%s", body)
	}
	if code, body := get(t, nil, r.base+"/ca.crt"); code != http.StatusNotFound {
		t.Errorf("GET /ca.crt without HTTPS = %d %s, want 404", code, body)
	}
}
