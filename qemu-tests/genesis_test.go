package qemutests

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kiln-project/kiln/builder/realbin"
	"github.com/kiln-project/kiln/firstboot/role"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

const serviceName = "kubernetes.default.svc.cluster.local"

func configs(t *testing.T, siteYAML string) map[string][]byte {
	t.Helper()
	cfgs, err := cluster.Configs(siteYAML, filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	return cfgs
}

// eventually fails the test unless check passes within bound.
func eventually(t *testing.T, what string, bound time.Duration, check func() error) {
	t.Helper()
	if err := retry.Wait(context.Background(), what, bound, t.Logf, func(context.Context) error { return check() }); err != nil {
		t.Fatal(err)
	}
}

// withDockerProbe adds a unit that makes a Docker image of the node's
// kiln binary (every baked image is in containerd's seed, none is an
// archive Docker could load) and runs it (Docker beside containerd 2,
// which the kubelet uses), printing the result and, on failure, Docker's
// last words to the console.
func withDockerProbe(t *testing.T, cfg []byte) []byte {
	script := "#!/bin/sh\nout=$( (tar -C / -c usr/bin/kiln | docker import - kiln-probe:local && docker run --rm --network none kiln-probe:local" +
		" /usr/bin/kiln --version) 2>&1 )\nif echo \"$out\" | grep -q '^kiln version'; then r=ok; else r=failed; fi\n" +
		"echo \"probe: docker=$r\" > /dev/ttyS0\n[ $r = ok ] || echo \"$out\" | tail -3 > /dev/ttyS0\n"
	unit := "[Unit]\nAfter=docker.service kiln-role.service\nRequires=docker.service\n[Service]\nType=oneshot\n" +
		"ExecStart=/bin/sh /var/lib/kiln/docker-probe.sh\n[Install]\nWantedBy=multi-user.target\n"
	return withScriptUnit(t, cfg, "kiln-test-docker.service", unit, "/var/lib/kiln/docker-probe.sh", script)
}

// withCPUReport, when KILN_CPU_REPORT is a number of seconds, adds a unit
// that prints the guest's busiest processes by CPU time used so far to
// the console at that interval, each with its scheduling class (TS, RR):
// where a slow boot under TCG spends its time. Off unless asked for.
func withCPUReport(t *testing.T, cfg []byte) []byte {
	every := os.Getenv("KILN_CPU_REPORT")
	if every == "" {
		return cfg
	}
	script := "#!/bin/sh\nwhile sleep " + every + "; do\n" +
		"  { echo \"cpu-report: up $(cut -d' ' -f1 /proc/uptime)s load $(cut -d' ' -f1-3 /proc/loadavg)\"\n" +
		"    ps -eo time=,etimes=,cls=,comm=,args= --sort=-time | head -14 | cut -c1-150 | sed 's/^/cpu-report: /'; } > /dev/ttyS0\ndone\n"
	unit := "[Unit]\nDescription=kiln test: CPU report\n[Service]\nExecStart=/bin/sh /var/lib/kiln/cpu-report.sh\n" +
		"[Install]\nWantedBy=multi-user.target\n"
	return withScriptUnit(t, cfg, "kiln-test-cpu-report.service", unit, "/var/lib/kiln/cpu-report.sh", script)
}

// withScriptUnit adds a script and an enabled unit to an Ignition config.
func withScriptUnit(t *testing.T, cfg []byte, name, unit, path, script string) []byte {
	t.Helper()
	return editConfig(t, cfg, func(c map[string]any) {
		appendTo(c, "storage", "files", map[string]any{"path": path, "mode": 0o755,
			"contents": map[string]any{"source": "data:;base64," + base64.StdEncoding.EncodeToString([]byte(script))}})
		appendTo(c, "systemd", "units", map[string]any{"name": name, "enabled": true, "contents": unit})
	})
}

// editConfig is an Ignition config changed by edit, as a generic JSON
// document: what a hand-made change to kiln gen's output looks like.
func editConfig(t *testing.T, cfg []byte, edit func(map[string]any)) []byte {
	t.Helper()
	var c map[string]any
	if err := json.Unmarshal(cfg, &c); err != nil {
		t.Fatal(err)
	}
	edit(c)
	return mustJSON(t, c)
}

// appendTo appends v to the list c[section][list], making either.
func appendTo(c map[string]any, section, list string, v any) {
	m, _ := c[section].(map[string]any)
	if m == nil {
		m = map[string]any{}
		c[section] = m
	}
	items, _ := m[list].([]any)
	m[list] = append(items, v)
}

// Genesis scenario 3: a genesis config for a site whose other master
// already runs etcd (a real etcd on the host, reached as 10.0.2.2, with
// that master's certificate) never bootstraps a second cluster: it says
// the cluster exists and turns to the master join.
func TestGenesisJoinsWhenItsClusterExists(t *testing.T) {
	out := outDir(t)
	dir := logDir(t, out)
	cfgs := configs(t, cluster.GenesisSite(true))
	hostEtcd(t, dir, "m2", cfgs["m2"])
	disk := filepath.Join(dir, "state.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", disk, "2G")
	v := startVM(t, vm.Config{Name: "refuse", Dir: dir, Firmware: vm.BIOS, Boot: vm.BootISO, Direct: true, MAC: cluster.GenesisMAC,
		ISO: filepath.Join(out, "node.iso"), Disks: []vm.Disk{{Path: disk, Format: "qcow2"}}, Ignition: cfgs["g1"]})
	line := waitLine(t, v, `genesis: cluster already exists|kiln-firstboot: (done role=|error: role)|bootstrapping is safe`)
	if !strings.Contains(line, "genesis: cluster already exists (m2 answers); joining as a master") {
		t.Fatalf("got %q, want the genesis node to join the existing cluster", line)
	}
	if l, ok := v.Find(mustRe(`bootstrapping is safe|done role=genesis`)); ok {
		t.Errorf("the genesis node of an existing cluster bootstrapped: %q", l)
	}
}

// hostEtcd runs a real one-member etcd on the host as the site's master
// name, with that master's etcd certificates from its config cfg,
// serving clients on 127.0.0.1:2379: a guest on QEMU's user network
// reaches it as 10.0.2.2:2379. It stops when the test ends.
func hostEtcd(t *testing.T, dir, name string, cfg []byte) {
	t.Helper()
	pkiDir := t.TempDir()
	for _, f := range []string{"etcd-server.crt", "etcd-server.key", "etcd/ca.crt"} {
		data, err := cluster.File(cfg, "/etc/kiln/pki/"+f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkiDir, filepath.Base(f)), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := net.Dial("tcp", "127.0.0.1:2379"); err == nil {
		c.Close()
		t.Fatal("127.0.0.1:2379 is taken: this scenario runs etcd there (the guest reaches it as 10.0.2.2:2379)")
	}
	etcd := exec.Command(realbin.Etcd(t), "--name", name, "--data-dir", filepath.Join(t.TempDir(), "etcd"),
		"--listen-client-urls", "https://127.0.0.1:2379", "--advertise-client-urls", "https://10.0.2.2:2379",
		"--listen-peer-urls", "http://127.0.0.1:0", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", name+"=http://127.0.0.1:2380", "--listen-metrics-urls", "http://127.0.0.1:0",
		"--cert-file", filepath.Join(pkiDir, "etcd-server.crt"), "--key-file", filepath.Join(pkiDir, "etcd-server.key"),
		"--trusted-ca-file", filepath.Join(pkiDir, "ca.crt"), "--client-cert-auth")
	etcdLog, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	etcd.Stdout, etcd.Stderr = etcdLog, etcdLog
	if err := etcd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Process.Kill(); etcd.Wait() })
	eventually(t, "the host etcd listening", time.Minute, func() error {
		c, err := net.Dial("tcp", "127.0.0.1:2379")
		if err == nil {
			c.Close()
		}
		return err
	})
}

// The power-on-together case on one machine, on every host (make test's three-VM scenario
// holds m2's port only where the host runs two masters): the genesis
// node's site names a second master m2 at the host (10.0.2.2), whose
// etcd port first accepts and says nothing (the probe times out: a busy
// machine, a blocked switch port). The genesis node must not bootstrap,
// must say whom it waits for, and must rule m2 out once m2 answers as a
// master waiting to join (the banner, over TLS with m2's etcd serving
// certificate, asking for a client certificate of the site's etcd CA).
func TestGenesisWaitsOutAMasterThatTimesOut(t *testing.T) {
	out := outDir(t)
	dir := logDir(t, out)
	cfgs := configs(t, cluster.GenesisSite(true))
	m2 := hostWaitingMaster(t, cfgs["m2"])
	disk := filepath.Join(dir, "state.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", disk, "2G")
	v := startVM(t, vm.Config{Name: "survey", Dir: dir, Firmware: vm.BIOS, Boot: vm.BootISO, Direct: true, MAC: cluster.GenesisMAC,
		ISO: filepath.Join(out, "node.iso"), Disks: []vm.Disk{{Path: disk, Format: "qcow2"}}, Ignition: cfgs["g1"]})
	line := waitLine(t, v, `genesis: waiting to rule out m2|bootstrapping is safe|kiln-firstboot: (done role=|error: role)`)
	if !strings.Contains(line, "genesis: waiting to rule out m2 (10.0.2.2:2379): ") || !strings.Contains(line, "not bootstrapping while a cluster may exist") {
		t.Fatalf("got %q, want the genesis node to wait for m2, whose port times out", line)
	}
	t.Logf("while m2 timed out: %s", line)
	m2.answer()
	line = waitLine(t, v, `genesis: master m2 answers as waiting|bootstrapping is safe|kiln-firstboot: (done role=|error: role)`)
	if !strings.Contains(line, "genesis: master m2 answers as waiting to join, with no etcd member: ruled out") {
		t.Fatalf("got %q, want m2 ruled out by its waiting answer", line)
	}
	t.Logf("once m2 answered: %s", waitLine(t, v, `bootstrapping is safe`))
}

// waitingMaster is the host as the site's master m2 at 10.0.2.2:2379:
// silent until answer, then a master waiting to join.
type waitingMaster struct {
	ln        net.Listener
	answering atomic.Bool
}

func hostWaitingMaster(t *testing.T, cfg []byte) *waitingMaster {
	t.Helper()
	pem := map[string][]byte{}
	for _, f := range []string{"etcd-server.crt", "etcd-server.key", "etcd/ca.crt"} {
		data, err := cluster.File(cfg, "/etc/kiln/pki/"+f)
		if err != nil {
			t.Fatal(err)
		}
		pem[f] = data
	}
	pair, err := tls.X509KeyPair(pem["etcd-server.crt"], pem["etcd-server.key"])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem["etcd/ca.crt"]) {
		t.Fatal("m2's etcd CA: no certificate")
	}
	tlsCfg := &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	ln, err := net.Listen("tcp", "127.0.0.1:2379")
	if err != nil {
		t.Fatalf("127.0.0.1:2379 (where the guest reaches m2 as 10.0.2.2:2379): %v", err)
	}
	m := &waitingMaster{ln: ln}
	var held []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !m.answering.Load() {
				mu.Lock()
				held = append(held, c) // silent: the guest's probe times out
				mu.Unlock()
				continue
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				s := tls.Server(c, tlsCfg)
				if s.Handshake() == nil {
					s.Write([]byte(role.WaitingBanner))
				}
			}()
		}
	}()
	return m
}

func (m *waitingMaster) answer() { m.answering.Store(true) }
