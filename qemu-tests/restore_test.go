package qemutests

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/contract/layout"
	"github.com/kiln-project/kiln/gen/nodeconfig"
	"github.com/kiln-project/kiln/internal/ignition"
	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
	"github.com/kiln-project/kiln/qemu-tests/netns"
)

// TestEtcdRestore is a one-master cluster m1 on the test's segment, its
// configs made by the real kiln gen, through two boots:
//
//  1. m1 bootstraps; ConfigMap before-snapshot is written, `kiln etcd
//     snapshot` pulls a snapshot from inside the segment, ConfigMap
//     after-snapshot is written.
//  2. The cluster is lost (m1 on a blank state disk) and m1 bootstraps
//     again from a config whose site names the snapshot
//     (cluster.restoreFrom): before-snapshot is there, after-snapshot is
//     not, a watch from after-snapshot's resourceVersion gets 410 Gone,
//     and m1 is Ready. Its snapshot timer is active, and its snapshot
//     service, started by hand, leaves a snapshot on the state partition.
//
// It runs with KILN_CLUSTER=1 (make cluster-test CLUSTER_TESTS=TestEtcdRestore,
// make soak): two genesis bootstraps do not fit CI's budget beside the
// cluster scenario. make integration restores a snapshot on a real etcd
// and apiserver on the host (TestRestoreOnARealEtcd).
func TestEtcdRestore(t *testing.T) {
	if os.Getenv("KILN_CLUSTER") != "1" {
		t.Skip("runs with KILN_CLUSTER=1 (make cluster-test CLUSTER_TESTS=TestEtcdRestore, make soak); too long for make test's budget")
	}
	parallelBoot(t)
	defer bodyEnded(t)
	out := outDir(t)
	dir := logDir(t, out)
	seg := segment(t)
	tl := newBootTimeline(t, dir, "etcd restore")
	g := newSiteGen(t, seg)
	keyA := sshKey(t, g.dir, "a")
	ctx := context.Background()

	// 1. A cluster, two writes around a snapshot.
	cfg := g.gen(t, keyA, "10.77.0.1", "")
	m1 := &clusterVM{Machine: g.m1}
	m1.VM = startClusterVM(t, seg, out, dir, g.m1, cfg)
	waitDone(t, tl, m1, "bootstrapped")
	kube := g.client(t)
	eventually(t, "node m1 Ready", clusterSettle, func() error { return clustercheck.NodeReady(ctx, kube, "m1", time.Time{}) })
	createConfigMap(t, kube, "before-snapshot")
	snap := filepath.Join(g.dir, "backup.db")
	out1, err := seg.Command(ctx, kilnBinary(t), "etcd", "snapshot", "-f", g.site, "--pki", g.pki, "-o", snap).CombinedOutput()
	t.Logf("kiln etcd snapshot:\n%s", out1)
	if err != nil {
		t.Fatalf("kiln etcd snapshot: %v", err)
	}
	after := createConfigMap(t, kube, "after-snapshot")

	// 2. The cluster lost, restored from the snapshot.
	cfg = g.gen(t, keyA, "10.77.0.1", snap)
	since := reimage(t, m1, dir, cfg)
	t.Logf("m1: %s", waitLine(t, m1.VM, `kiln-firstboot: restored etcd from `))
	waitDone(t, tl, m1, "bootstrapped")
	eventually(t, "node m1 Ready after the restore", clusterSettle, func() error { return clustercheck.NodeReady(ctx, kube, "m1", since) })
	checkRestored(t, kube, after.ResourceVersion)
	checkScheduledSnapshot(t, seg, g.m1.IP(), keyA)
}

// TestConfigChangeKeepsState is worker w1 of a kiln gen site (its
// masters never powered on: what is proven is the config's part, done
// before the role) on the test's segment, through three boots with one
// state disk:
//
//  1. w1 takes its config (one SSH key and NTP server) from fw_cfg.
//  2. A config change (another SSH key, another NTP server) reaches w1
//     with its state kept: booted with the new config's URL and hash, w1
//     takes it; the new key logs in, the old one does not, and timesyncd
//     has the new server.
//  3. A broken change (a file whose content does not match its hash,
//     added to the next config by hand) falls back to the previous
//     config, which the new one names and which only the state partition
//     holds: w1 says so, and the key of boot 2 still logs in.
func TestConfigChangeKeepsState(t *testing.T) {
	parallelBoot(t)
	defer bodyEnded(t)
	out := outDir(t)
	dir := logDir(t, out)
	seg := segment(t)
	g := newSiteGen(t, seg)
	g.worker = &cluster.Machine{Name: "w1", Role: "worker", MAC: cluster.W1MAC, Addr: cluster.W1Addr, CPUs: 1, MemoryMiB: 2048}
	keyA, keyB := sshKey(t, g.dir, "a"), sshKey(t, g.dir, "b")
	host := g.worker.IP()

	// 1. The first config.
	w1 := startClusterVM(t, seg, out, dir, *g.worker, g.gen(t, keyA, "10.77.0.1", ""))
	waitLine(t, w1, doneLine+"fw_cfg")
	checkSSH(t, seg, host, keyA, "10.77.0.1")

	// 2. A config change: another SSH key and NTP server. A pinned boot
	// sets the stored config aside, network files included: the image's
	// DHCP default must find a server to reach the config's URL.
	dhcp, err := seg.ServeDHCP(filepath.Join(dir, "dhcp"), "http://"+cluster.Gateway+"/no-network-boot",
		map[string]netip.Addr{g.worker.MAC: netip.MustParseAddr(host)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dhcp.Stop() })
	base := w1.Append
	pinned := func(cfg []byte) {
		w1.PowerCut()
		w1.Ignition = nil
		w1.Append = base + " ignition.config.url=" + g.url + " kiln.config.hash=" + ignition.Hash(cfg)
		if err := w1.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	pinned(g.gen(t, keyB, "10.77.0.9", ""))
	waitLine(t, w1, `kiln-firstboot: done source=url`)
	checkSSH(t, seg, host, keyB, "10.77.0.9")
	if out, err := sshRun(seg, host, keyA, "true"); err == nil {
		t.Errorf("the replaced SSH key still logs in: %s", out)
	}

	// 3. A broken change falls back to the config it names.
	broken := withBadFile(t, g.gen(t, keyA, "10.77.0.8", ""))
	g.serve(t, broken)
	pinned(broken)
	t.Logf("w1: %s", waitLine(t, w1, `kiln-firstboot: config sha512-\S+ failed: .*falling back to the previous config`))
	waitLine(t, w1, `kiln-firstboot: done source=state fell-back-from=`)
	checkSSH(t, seg, host, keyB, "10.77.0.9")
}

// siteGen is the scenario's site, rendered by the real kiln gen into
// one output directory (so each run names the config it replaces), and
// the booted machine's config served at url inside the segment: the
// genesis m1's, or the worker's when the site has one.
type siteGen struct {
	m1                       cluster.Machine
	worker                   *cluster.Machine // in the site when set, and the machine booted
	dir, site, pki, out, url string
	admin                    []byte
	seg                      *netns.Net
	served                   []byte // what url answers: the last gen's, unless serve replaced it
}

func newSiteGen(t *testing.T, seg *netns.Net) *siteGen {
	t.Helper()
	g := &siteGen{m1: cluster.Machine{Name: "m1", Role: "genesis", MAC: cluster.M1MAC, Addr: cluster.M1Addr, CPUs: 1, MemoryMiB: 3072}, dir: t.TempDir(), seg: seg}
	g.site, g.pki, g.out = filepath.Join(g.dir, "site.yaml"), filepath.Join(g.dir, "pki"), filepath.Join(g.dir, "out")
	ln, err := seg.Listen("tcp", net.JoinHostPort(cluster.Gateway, "0"))
	if err != nil {
		t.Fatal(err)
	}
	g.url = "http://" + ln.Addr().String() + "/node.ign"
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(g.served) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return g
}

// gen writes the site (key the root's SSH key, ntp its NTP server,
// restore the snapshot the genesis node restores, when not ""), runs
// kiln gen and returns the booted machine's config, which url then
// serves.
func (g *siteGen) gen(t *testing.T, key, ntp, restore string) []byte {
	t.Helper()
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	extra := fmt.Sprintf("  timing: slow\n  ntpServers: [%s]\n  sshAuthorizedKeys: [%q]\n", ntp, strings.TrimSpace(string(pub)))
	if restore != "" {
		extra += fmt.Sprintf("  restoreFrom: {file: %q}\n", restore)
	}
	machines := []cluster.Machine{g.m1}
	if g.worker != nil {
		machines = append(machines, *g.worker)
	}
	site := cluster.SiteHead(extra)
	for _, m := range machines {
		site += fmt.Sprintf("  - {name: %s, role: %s, macs: [%q], installDisk: /dev/vda, network: {address: %s, gateway: %s}}\n",
			m.Name, m.Role, m.MAC, m.Addr, cluster.Gateway)
	}
	booted := machines[len(machines)-1]
	if err := os.WriteFile(g.site, []byte(site), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kilnBinary(t), "gen", "-f", g.site, "--pki", g.pki, "-o", g.out).CombinedOutput()
	if err != nil {
		t.Fatalf("kiln gen: %v\n%s", err, out)
	}
	cfg, err := os.ReadFile(filepath.Join(g.out, "nodes", booted.Name+".ign"))
	if err != nil {
		t.Fatal(err)
	}
	if g.admin, err = os.ReadFile(filepath.Join(g.out, "admin.kubeconfig")); err != nil {
		t.Fatal(err)
	}
	g.served = cfg
	return cfg
}

func (g *siteGen) serve(t *testing.T, cfg []byte) { g.served = cfg }

func (g *siteGen) client(t *testing.T) kubernetes.Interface {
	t.Helper()
	kube, err := cluster.FailoverClient(g.admin, []string{g.m1.IP()}, g.seg.DialContext, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

func createConfigMap(t *testing.T, kube kubernetes.Interface, name string) *corev1.ConfigMap {
	t.Helper()
	var cm *corev1.ConfigMap
	createEventually(t, "ConfigMap "+name, func() error {
		var err error
		cm, err = kube.CoreV1().ConfigMaps("default").Create(context.Background(),
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		return err
	})
	if cm == nil {
		if got, err := kube.CoreV1().ConfigMaps("default").Get(context.Background(), name, metav1.GetOptions{}); err == nil {
			cm = got
		} else {
			t.Fatal(err)
		}
	}
	return cm
}

// checkRestored: the write before the snapshot is there, the one after
// it is not, and a watch from the later write's resourceVersion is told
// that version is gone (410), as a client that saw the lost cluster is.
func checkRestored(t *testing.T, kube kubernetes.Interface, afterRV string) {
	t.Helper()
	ctx := context.Background()
	eventually(t, "ConfigMap before-snapshot after the restore", 5*time.Minute, func() error {
		_, err := kube.CoreV1().ConfigMaps("default").Get(ctx, "before-snapshot", metav1.GetOptions{})
		return err
	})
	if _, err := kube.CoreV1().ConfigMaps("default").Get(ctx, "after-snapshot", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap after-snapshot after the restore: %v, want not found", err)
	}
	w, err := kube.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{ResourceVersion: afterRV})
	if err != nil {
		if !apierrors.IsGone(err) && !apierrors.IsResourceExpired(err) {
			t.Fatalf("a watch from resourceVersion %s: %v, want 410 Gone", afterRV, err)
		}
		t.Logf("a watch from resourceVersion %s: %v", afterRV, err)
		return
	}
	defer w.Stop()
	select {
	case e := <-w.ResultChan():
		status, ok := e.Object.(*metav1.Status)
		if e.Type != watch.Error || !ok || status.Code != http.StatusGone {
			t.Fatalf("a watch from resourceVersion %s: first event %s %v, want an error 410", afterRV, e.Type, e.Object)
		}
		t.Logf("a watch from resourceVersion %s: %d %s", afterRV, status.Code, status.Message)
	case <-time.After(time.Minute):
		t.Fatalf("a watch from resourceVersion %s: no event within a minute, want an error 410", afterRV)
	}
}

// sshKey makes an ed25519 key pair at dir/name(.pub).
func sshKey(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "kiln-test-"+name, "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	return path
}

// sshRun runs command as root on host with key, from inside the segment.
func sshRun(seg *netns.Net, host, key, command string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return seg.Command(ctx, "ssh", "-i", key, "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=15", "-o", "LogLevel=ERROR", "root@"+host, command).CombinedOutput()
}

// checkSSH: key logs in as root on host, and timesyncd has ntp among its
// servers (from the config's network file).
func checkSSH(t *testing.T, seg *netns.Net, host, key, ntp string) {
	t.Helper()
	var out []byte
	eventually(t, "root's login with "+filepath.Base(key)+" and NTP server "+ntp, 3*time.Minute, func() error {
		var err error
		if out, err = sshRun(seg, host, key, "timedatectl show-timesync -p LinkNTPServers --value"); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if !strings.Contains(string(out), ntp) {
			return fmt.Errorf("timesyncd's link NTP servers: %q", strings.TrimSpace(string(out)))
		}
		return nil
	})
	t.Logf("ssh with key %s: timesyncd's link NTP servers %s", filepath.Base(key), strings.TrimSpace(string(out)))
}

// withBadFile adds to an Ignition config a file whose content does not
// match its verification hash: a config that parses and names its
// predecessor, but fails before anything is written.
func withBadFile(t *testing.T, cfg []byte) []byte {
	t.Helper()
	return editConfig(t, cfg, func(c map[string]any) {
		appendTo(c, "storage", "files", map[string]any{
			"path":     "/etc/kiln-test-broken",
			"contents": map[string]any{"source": "data:,x", "verification": map[string]any{"hash": "sha512-" + strings.Repeat("0", 128)}},
		})
	})
}

// checkScheduledSnapshot: the snapshot timer of the master at host is
// active, and its service (started now rather than waited for) writes a
// snapshot that etcd's own integrity hash ends, into the state
// partition's snapshot directory.
func checkScheduledSnapshot(t *testing.T, seg *netns.Net, host, key string) {
	t.Helper()
	out, err := sshRun(seg, host, key, "systemctl is-active "+nodeconfig.SnapshotTimer+" && systemctl start "+nodeconfig.SnapshotService+
		" && ls "+layout.EtcdSnapshotDir)
	t.Logf("the scheduled snapshot on %s:\n%s", host, out)
	if err != nil {
		t.Fatalf("the scheduled snapshot on %s: %v", host, err)
	}
	if !regexp.MustCompile(`(?m)^etcd-\d{8}T\d{6}Z-rev\d+\.db$`).Match(out) {
		t.Errorf("no snapshot in %s after %s ran", layout.EtcdSnapshotDir, nodeconfig.SnapshotService)
	}
}
