package qemutests

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/clustercheck"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
)

// TestThreeMastersSoak is make soak's lifecycle on three masters and a
// worker (cluster.ThreeMastersAndWorker; KILN_SOAK=1): every step an
// operator takes over a cluster's life, in a row, on one running cluster.
//
//  1. m3 is lost for good (powered off): the cluster still takes writes
//     with two of three etcd members; `kiln node remove m3`, the real
//     command inside the namespace, removes the dead member;
//  2. m3 re-imaged (a blank state disk, its config) joins again;
//  3. m1, the genesis machine, re-imaged with its genesis config, joins
//     as a master (it never bootstraps a second cluster);
//  4. the master role moves from m2 to w1: w1 removed as a worker,
//     re-imaged with a master config from a second kiln gen run on the
//     same PKI, a voting member; then m2's master label is taken off
//     through the API and m2 leaves by itself;
//  5. KILN_POWER_CUTS whole-cluster power cuts in a row, each with a
//     ConfigMap written before and read back after.
func TestThreeMastersSoak(t *testing.T) {
	if os.Getenv("KILN_SOAK") != "1" {
		t.Skip("make soak's three-master lifecycle runs with KILN_SOAK=1 (make soak)")
	}
	ctx := context.Background()
	tp := cluster.ThreeMastersAndWorker()
	r := newClusterRun(t, tp)
	// While m1 is re-imaged its apiserver is gone: the operator's client
	// tries each master in turn.
	kube, err := failoverClient(r, tp)
	if err != nil {
		t.Fatal(err)
	}
	r.kube = kube
	r.bootAll(t)
	checkWholeCluster(t, tp, r.seg, kube, r.cfgs["m1"], time.Time{})
	vms := map[string]*clusterVM{}
	for _, n := range r.nodes {
		vms[n.Name] = n
	}
	m1, m2, m3, w1 := vms["m1"], vms["m2"], vms["m3"], vms["w1"]
	siteFile := filepath.Join(t.TempDir(), "site.yaml")
	if err := os.WriteFile(siteFile, []byte(tp.Site()), 0o600); err != nil {
		t.Fatal(err)
	}
	kiln := kilnBinary(t)

	// 1. m3 lost for good.
	m3.PowerCut()
	start := time.Now()
	createEventually(t, "a ConfigMap with m3 down", func() error {
		_, err := kube.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "written-with-m3-down"}}, metav1.CreateOptions{})
		return err
	})
	t.Logf("m3 powered off for good: a write acknowledged by two of three etcd members %s later", time.Since(start).Round(time.Second))
	eventually(t, "node m3 no longer Ready", 5*time.Minute, func() error { return notReady(ctx, kube, "m3") })
	start = time.Now()
	out, err := r.seg.Command(ctx, kiln, "node", "remove", "m3", "-f", siteFile, "--pki", r.pkiDir, "--timeout", "2m").CombinedOutput()
	t.Logf("kiln node remove m3, a dead master (%s):\n%s", time.Since(start).Round(time.Second), out)
	if err != nil {
		t.Fatalf("kiln node remove m3: %v", err)
	}
	checkEtcdVoters(t, tp, r.seg, r.cfgs["m1"], []string{"m1", "m2"})

	// 2. m3 re-imaged.
	start = time.Now()
	since := reimage(t, m3, r.dir, r.cfgs["m3"])
	waitDone(t, r.tl, m3, "joined")
	eventually(t, "node m3 Ready again", clusterSettle, func() error { return clustercheck.NodeReady(ctx, kube, "m3", since) })
	t.Logf("m3 re-imaged: joined and Ready %s after power-on", time.Since(start).Round(time.Second))
	checkEtcdVoters(t, tp, r.seg, r.cfgs["m2"], []string{"m1", "m2", "m3"})

	// 3. The genesis machine re-imaged with its genesis config.
	start = time.Now()
	since = reimage(t, m1, r.dir, r.cfgs["m1"])
	m1.Role = "master" // a genesis machine of an existing cluster joins, and says so as a master
	waitDone(t, r.tl, m1, "joined")
	if _, ok := m1.Find(mustRe(`genesis: cluster already exists \(m[23] answers\); joining as a master`)); !ok {
		t.Errorf("m1's console does not say it joined an existing cluster")
	}
	eventually(t, "node m1 Ready again", clusterSettle, func() error { return clustercheck.NodeReady(ctx, kube, "m1", since) })
	t.Logf("m1 (genesis) re-imaged: joined as a master and Ready %s after power-on", time.Since(start).Round(time.Second))
	checkEtcdVoters(t, tp, r.seg, r.cfgs["m1"], []string{"m1", "m2", "m3"})

	// 4. The master role from m2 to w1: the new master first.
	moved := tp.WithRole("w1", "master")
	cfgs, err := cluster.Configs(moved.Site(), r.pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	removeRunningWorker(t, tp, kube, w1)
	start = time.Now()
	w1.Role = "master"
	since = reimage(t, w1, r.dir, withCPUReport(t, cfgs["w1"]))
	waitDone(t, r.tl, w1, "joined")
	eventually(t, "node w1 Ready as a master", clusterSettle, func() error { return clustercheck.NodeReady(ctx, kube, "w1", since) })
	t.Logf("w1 re-imaged with a master config: joined and Ready %s after power-on", time.Since(start).Round(time.Second))
	checkEtcdVoters(t, tp, r.seg, r.cfgs["m1"], []string{"m1", "m2", "m3", "w1"})
	after := tp.WithRole("w1", "master", "m2")
	removeMasterThroughAPI(t, after, r.seg, kube, m2, r.cfgs["m1"], r.image, "m3", after.Masters()...)
	// The operator's clean-up: m2 is out (it stays out until re-imaged);
	// its Node goes, and its machine is powered off.
	if err := kube.CoreV1().Nodes().Delete(ctx, "m2", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting Node m2: %v", err)
	}
	m2.PowerCut()
	checkWholeCluster(t, after, r.seg, kube, r.cfgs["m1"], time.Time{})

	// 5. Whole-cluster power cuts in a row.
	nodes := []*clusterVM{m1, m3, w1}
	for cut := 1; cut <= powerCuts(t); cut++ {
		start := time.Now()
		wholeClusterPowerCut(t, after, r.seg, kube, r.tl, nodes, r.cfgs["m1"], r.image, cut)
		t.Logf("soak power cut %d: every node Ready, kube-system running, checks passed and the write read back %s after power-on (writes lost: 0)",
			cut, time.Since(start).Round(time.Second))
	}
}

// failoverClient is the admin client of the run, dialling each master in
// the site's order when the one asked for does not answer (kiln gen's
// kubeconfig has a context per master, all with the discovery name as
// the TLS server name, so any master's certificate is good).
func failoverClient(r *clusterRun, tp cluster.Topology) (kubernetes.Interface, error) {
	var ips []string
	for _, m := range tp.Machines {
		ips = append(ips, m.IP()) // w1 too: it becomes a master
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		var errs []error
		for _, ip := range ips {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			c, err := r.seg.DialContext(ctx, network, net.JoinHostPort(ip, port))
			cancel()
			if err == nil {
				return c, nil
			}
			errs = append(errs, err)
		}
		return nil, errors.Join(errs...)
	}
	kube, _, err := cluster.NetnsClient(r.admin, "", dial)
	return kube, err
}

// notReady is nil once the Node's Ready condition is no longer True.
func notReady(ctx context.Context, kube kubernetes.Interface, name string) error {
	n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return fmt.Errorf("Node %s still Ready (%s)", name, strings.TrimSpace(c.Message))
		}
	}
	return nil
}
