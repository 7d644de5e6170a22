package qemutests

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
)

// TestThreeMastersSoak is make soak's lifecycle on three masters and a
// worker (cluster.ThreeMastersAndWorker; KILN_SOAK=1): every step an
// operator takes over a cluster's life, in a row, on one running cluster.
// It never runs more than three guests at once: its first run, with w1
// booted beside the three masters, starved on 2 host cores under TCG (no
// controller-manager kept its lease long enough to give a re-imaged m3
// its DaemonSet pods). So the master role moves while m3 is out, and m3
// comes back once m2 has left:
//
//  1. m1, m2 and m3 join; m3 is lost for good (powered off): the cluster
//     still takes writes with two of three etcd members; `kiln node
//     remove m3`, the real command inside the namespace, removes the
//     dead member;
//  2. w1 joins as a worker, and a pod on it reaches one on m1;
//  3. the master role moves from m2 to w1: w1 removed as a worker,
//     re-imaged with a master config from a second kiln gen run on the
//     same PKI, a voting member; then m2's master label is taken off
//     through the API and m2 leaves by itself;
//  4. m3 re-imaged (a blank state disk, a config from that second run)
//     joins again;
//  5. m1, the genesis machine, re-imaged with its genesis config (from
//     the second run, as the operator's site directory now holds), joins
//     as a master (it never bootstraps a second cluster): its stale
//     member is replaced, as two of three members answer;
//  6. KILN_POWER_CUTS whole-cluster power cuts in a row, each with a
//     ConfigMap written before and read back after.
func TestThreeMastersSoak(t *testing.T) {
	if os.Getenv("KILN_SOAK") != "1" {
		t.Skip("make soak's three-master lifecycle runs with KILN_SOAK=1 (make soak)")
	}
	defer bodyEnded(t)
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
	w1 := r.hold("w1")
	masters := tp.Without("w1")
	r.bootAll(t)
	checkWholeCluster(t, masters, r.seg, kube, r.cfgs["m1"], time.Time{})
	vms := map[string]*clusterVM{}
	for _, n := range r.nodes {
		vms[n.Name] = n
	}
	m1, m2, m3 := vms["m1"], vms["m2"], vms["m3"]
	kiln := kilnBinary(t)
	siteFile := writeSite(t, tp)

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

	// 2. w1 joins as a worker.
	start = time.Now()
	w1.VM = startClusterVM(t, r.seg, r.out, r.dir, w1.Machine, r.cfgs["w1"])
	waitDone(t, r.tl, w1, "joined")
	withWorker := tp.Without("m3")
	checkWholeCluster(t, withWorker, r.seg, kube, r.cfgs["m1"], time.Time{})
	checkPodNetwork(t, kube, r.image, "w1")
	t.Logf("w1 joined as a worker, its pod reached m1's: %s after power-on", time.Since(start).Round(time.Second))

	// 3. The master role from m2 to w1: the new master first.
	moved := tp.WithRole("w1", "master")
	cfgs, err := cluster.Configs(moved.Site(), r.pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	removeRunningWorker(t, tp, kube, w1)
	readmit(t, moved, r.seg, cfgs, r.pkiDir, "w1")
	start = time.Now()
	w1.Role = "master"
	since := reimage(t, w1, r.dir, cfgs["w1"])
	waitDone(t, r.tl, w1, "joined")
	eventually(t, "node w1 Ready as a master", clusterSettle, func() error { return clustercheck.NodeReady(ctx, kube, "w1", since) })
	t.Logf("w1 re-imaged with a master config: joined and Ready %s after power-on", time.Since(start).Round(time.Second))
	checkEtcdVoters(t, tp, r.seg, r.cfgs["m1"], []string{"m1", "m2", "w1"})
	final := tp.WithRole("w1", "master", "m2")
	removeMasterThroughAPI(t, final, r.seg, kube, m2, r.cfgs["m1"], r.image, "m1", m1.Machine, w1.Machine)
	// The operator's clean-up: m2 is out (it stays out until re-imaged);
	// its Node goes, and its machine is powered off.
	if err := kube.CoreV1().Nodes().Delete(ctx, "m2", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting Node m2: %v", err)
	}
	m2.PowerCut()

	// 4. m3 re-imaged, with a config of the site as it is now (kiln gen
	// puts w1 in its seed zone).
	finalCfgs, err := cluster.Configs(final.Site(), r.pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	readmit(t, final, r.seg, finalCfgs, r.pkiDir, "m3")
	start = time.Now()
	since = reimage(t, m3, r.dir, finalCfgs["m3"])
	waitDone(t, r.tl, m3, "joined")
	eventually(t, "node m3 Ready again", clusterSettle, func() error { return clustercheck.NodeReady(ctx, kube, "m3", since) })
	t.Logf("m3 re-imaged: joined and Ready %s after power-on", time.Since(start).Round(time.Second))
	checkEtcdVoters(t, tp, r.seg, r.cfgs["m1"], []string{"m1", "m3", "w1"})

	// 5. The genesis machine re-imaged with its genesis config.
	start = time.Now()
	since = reimage(t, m1, r.dir, finalCfgs["m1"])
	m1.Role = "master" // a genesis machine of an existing cluster joins, and says so as a master
	waitDone(t, r.tl, m1, "joined")
	if _, ok := m1.Find(mustRe(`genesis: cluster already exists \((m3|w1) answers\); joining as a master`)); !ok {
		t.Errorf("m1's console does not say it joined an existing cluster")
	}
	eventually(t, "node m1 Ready again", clusterSettle, func() error { return clustercheck.NodeReady(ctx, kube, "m1", since) })
	t.Logf("m1 (genesis) re-imaged: joined as a master and Ready %s after power-on", time.Since(start).Round(time.Second))
	checkWholeCluster(t, final, r.seg, kube, r.cfgs["m1"], time.Time{})
	out, err = r.seg.Command(ctx, kiln, "node", "list", "-f", writeSite(t, final), "--pki", r.pkiDir).CombinedOutput()
	t.Logf("kiln node list:\n%s", out)
	if err != nil {
		t.Errorf("kiln node list after the lifecycle: %v", err)
	}

	// 6. Whole-cluster power cuts in a row.
	r.powerCutsInARow(t, "soak", final, []*clusterVM{m1, m3, w1}, nil)
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
