package role

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// m2Prober is a master that holds its first `silent` connections open
// without a word, as a busy machine or a port still blocked by a switch
// would (the genesis node's probe times out); after that it answers with
// next, or refuses (next nil: its listener is closed).
type m2Prober struct {
	ln     net.Listener
	mu     sync.Mutex
	silent int
	next   func(net.Conn)
	held   []net.Conn
}

func newM2Prober(t *testing.T, silent int, next func(net.Conn)) *m2Prober {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &m2Prober{ln: ln, silent: silent, next: next}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.held {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			switch {
			case p.silent > 0:
				p.silent--
				p.held = append(p.held, c)
				if p.silent == 0 && p.next == nil {
					ln.Close() // from now on: connection refused
				}
			default:
				go p.next(c)
			}
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *m2Prober) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// genesisBeside is a genesis node g1 of the test site whose other master
// m2 is at 127.0.0.1:port, probed with a short bound.
func genesisBeside(t *testing.T, port int) (*Node, *[]string) {
	t.Helper()
	root, _ := nodeRoot(t, "g1")
	pointMastersAtLoopback(t, root)
	var mu sync.Mutex
	log := &[]string{}
	n := &Node{Root: root, Sys: &recorder{}, Wait: time.Second, EtcdPort: port, probeBound: 300 * time.Millisecond,
		Log: func(f string, a ...any) { mu.Lock(); defer mu.Unlock(); *log = append(*log, fmt.Sprintf(f, a...)) }}
	n.file, n.cat = mustLoad(t, n)
	return n, log
}

func logHas(log []string, sub string) bool {
	for _, l := range log {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

// m2BeaconTLS is the beacon's TLS of the test site's m2, from its PKI
// files as kiln gen gives them.
func m2BeaconTLS(t *testing.T, files map[string][]byte) *tls.Config {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"etcd-server.crt", "etcd-server.key", "etcd/ca.crt"} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, f), files["m2:/etc/kiln/pki/"+f], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := beaconTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A probe that times out is no proof of anything. The genesis
// node does not bootstrap and does not give up: it asks again, says
// whom it waits for, and bootstraps once the master refuses.
func TestGenesisWaitsOutATimeoutAndBootstrapsOnceTheMasterRefuses(t *testing.T) {
	m2 := newM2Prober(t, 1, nil)
	n, log := genesisBeside(t, m2.port())
	if err := n.units().survey.requireNoCluster(context.Background()); err != nil {
		t.Fatalf("m2 timed out once, then refused: %v", err)
	}
	want := fmt.Sprintf("genesis: waiting to rule out m2 (127.0.0.1:%d): ", m2.port())
	if !logHas(*log, want) || !logHas(*log, "not bootstrapping while a cluster may exist") {
		t.Errorf("console: %q, want a line starting %q", *log, want)
	}
	if !logHas(*log, "bootstrapping is safe") {
		t.Errorf("console: %q, want the survey's verdict", *log)
	}
}

// A master waiting to join rules itself out positively, so a site
// powered on together forms in one pass whatever the timing.
func TestGenesisRulesOutAMasterThatAnswersAsWaiting(t *testing.T) {
	_, files := nodeRoot(t, "g1")
	b := &beacon{cfg: m2BeaconTLS(t, files)}
	m2 := newM2Prober(t, 1, b.answer)
	n, log := genesisBeside(t, m2.port())
	// the test site's PKI differs from nodeRoot's next call: give g1 the
	// same site's files as m2's beacon.
	for k, data := range files {
		if node, p, _ := strings.Cut(k, ":"); node == "g1" && strings.HasPrefix(p, "/etc/kiln/pki/") {
			os.WriteFile(filepath.Join(n.Root, p), data, 0o600)
		}
	}
	if err := n.units().survey.requireNoCluster(context.Background()); err != nil {
		t.Fatalf("m2 timed out once, then answered as waiting: %v", err)
	}
	if !logHas(*log, "genesis: master m2 answers as waiting to join, with no etcd member: ruled out") {
		t.Errorf("console: %q", *log)
	}
}

// A stranger cannot fake the waiting answer: a beacon with another
// site's certificate is a foreign PKI, which ends the role at once.
func TestGenesisRefusesAWaitingAnswerFromAnotherPKI(t *testing.T) {
	_, other := nodeRoot(t, "g1")
	b := &beacon{cfg: m2BeaconTLS(t, other)}
	m2 := newM2Prober(t, 0, b.answer)
	n, _ := genesisBeside(t, m2.port())
	err := n.units().survey.requireNoCluster(context.Background())
	if err == nil || !errors.Is(err, errRefused) || !strings.Contains(err.Error(), "not from this site's etcd CA") {
		t.Fatalf("got %v, want the foreign PKI refused", err)
	}
}

// A genesis node that cannot rule a master out never bootstraps on its
// own: only the context ends its wait.
func TestGenesisNeverBootstrapsWhileAMasterTimesOut(t *testing.T) {
	m2 := newM2Prober(t, 1<<30, nil)
	n, _ := genesisBeside(t, m2.port())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := n.units().survey.requireNoCluster(ctx)
	if err == nil || errors.Is(err, errClusterExists) || !strings.Contains(err.Error(), "master m2 (127.0.0.1:") {
		t.Fatalf("got %v, want the wait to end only with its context, naming m2", err)
	}
}

// A master waiting for the cluster answers as waiting on its etcd port
// while it has no member, and frees the port once the cluster answers.
func TestWaitingMasterAnswersSurveysUntilTheClusterAnswers(t *testing.T) {
	root, files := nodeRoot(t, "m2")
	p := filepath.Join(root, "/etc/kiln/node.json")
	data, _ := os.ReadFile(p)
	// Every node certificate also names 127.0.0.1 and ::1: m2 itself at
	// the one, g1, which it joins, at the other.
	data = []byte(strings.ReplaceAll(string(data), `"10.0.2.51"`, `"127.0.0.1"`))
	data = []byte(strings.ReplaceAll(string(data), `"10.0.2.50"`, `"::1"`))
	os.WriteFile(p, data, 0o644)
	port := freePort(t)
	n := &Node{Root: root, Sys: &recorder{}, Wait: time.Minute, EtcdPort: port, probeBound: time.Second, Log: func(string, ...any) {}}
	n.file, n.cat = mustLoad(t, n)
	done := make(chan error, 1)
	u := n.units() // wired before the wait's goroutine shares them
	go func() { done <- u.join.waitForCluster(context.Background()) }()

	cfg, err := u.env.etcdClientTLS() // g1's client pair is the same site's
	if err != nil {
		t.Fatal(err)
	}
	m2 := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := probeEtcd(context.Background(), m2, cfg, time.Second)
		if got == waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("m2's port answered %v (%v), want its waiting banner", got, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// g1's etcd comes up: the wait ends, the beacon goes.
	g1, err := tls.X509KeyPair(files["g1:/etc/kiln/pki/etcd-server.crt"], files["g1:/etc/kiln/pki/etcd-server.key"])
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", fmt.Sprintf("[::1]:%d", port), &tls.Config{Certificates: []tls.Certificate{g1}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); c.(*tls.Conn).Handshake(); c.Write([]byte{0}); time.Sleep(time.Second) }()
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("wait for the cluster: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the wait did not see g1's etcd")
	}
	if _, err := net.Dial("tcp", m2); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("m2's port after the wait: %v, want refused (free for its etcd)", err)
	}
}
