package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
	"github.com/kiln-project/kiln/qemu-tests/netns"
	"github.com/kiln-project/kiln/qemu-tests/timeline"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

// The cluster part's bounds, the QEMU scenario's: a boot to its role's
// done line or to every Node Ready, and the cluster settling before the
// power cut.
const (
	clusterBoot   = 30 * time.Minute
	clusterSettle = 15 * time.Minute
)

// The goals, as multiples of the plain boot: the cluster all
// Ready, and back after a whole-cluster power cut.
const (
	goalAllReady = 6.0
	goalAfterCut = 4.0
)

const clusterTitle = "Cluster (the ISO's kernel booted directly, TCG, `norandmaps`, `timing: slow`; m1 genesis 1 vCPU 3 GiB, m2 master 1 vCPU 3 GiB, " +
	"w1 worker 1 vCPU 2 GiB, on a bridge in a network namespace; the host polls the Nodes through it every 2 s)"

// clusterTimeline names the cluster part's timeline; each of its rows
// starts at its own machine's power-on.
const clusterTimeline = "Cluster timeline (each row from its machine's power-on; m1, m2 and w1 powered on together)"

var clusterHead = [3]string{"step", "time", "floor: plain boot of the same ISO to the login prompt (booted the same way, 3 GiB, 1 vCPU)"}

// clusterNode is one machine of the QEMU cluster scenario's site, with
// the scenario's size; its role names its done line.
type clusterNode struct {
	cluster.Machine
	on time.Time // this boot's power-on
	*vm.VM
}

func clusterNodes() []*clusterNode {
	var out []*clusterNode
	for _, m := range cluster.ThreeNodes().Machines {
		out = append(out, &clusterNode{Machine: m})
	}
	return out
}

// benchCluster times the QEMU cluster scenario's site on the image: m1
// and m2 together to m1's bootstrap and m2's join, then w1's join and
// every Node Ready; then a whole-cluster power cut and every machine
// back with no config; then w1 and m2 each removed with kiln node remove
// and re-imaged (timeLifecycle). The floor is the same ISO's plain boot to the
// login prompt, measured here too. The namespace is removed and every VM
// powered off when the part ends, whatever happened.
func benchCluster(ctx context.Context, o options, work string, r *report) (err error) {
	dir := filepath.Join(work, "cluster")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	clusterLog("plain boot floor (3 GiB, 1 vCPU)")
	floor, err := timeBoot(ctx, o, filepath.Join(dir, "plain"), bootPath{name: "ISO", setup: withShape(scenarioPlain, 3072, 1)}, true, vm.LoginPrompt)
	if err != nil {
		return fmt.Errorf("cluster floor: %w", err)
	}
	r.addTimeline("cluster", clusterTimeline, floorRow("plain boot of the same ISO (3 GiB, 1 vCPU)", floor.console))
	clusterLog("plain boots of m1, m2 and w1's shapes at once (the power cut's contention)")
	together, err := timePlainTogether(ctx, o, filepath.Join(dir, "plain-together"), clusterNodes())
	if err != nil {
		return fmt.Errorf("cluster floor, three at once: %w", err)
	}
	pkiDir := filepath.Join(dir, "pki")
	cfgs, err := cluster.Configs(cluster.ThreeNodes().Site(), pkiDir)
	if err != nil {
		return fmt.Errorf("cluster site configs: %w", err)
	}
	admin, err := cluster.AdminKubeconfig(cluster.ThreeNodes().Site(), pkiDir)
	if err != nil {
		return fmt.Errorf("cluster admin kubeconfig: %w", err)
	}
	seg, err := netns.New(fmt.Sprintf("bench%d", os.Getpid()%100000), cluster.BridgeCIDR)
	if err != nil {
		return fmt.Errorf("cluster namespace: %w", err)
	}
	defer func() {
		clusterLog("removing namespace %s", seg.Name)
		if cerr := seg.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("removing namespace %s: %w", seg.Name, cerr))
		}
	}()
	c := &clusterRun{o: o, seg: seg, dir: dir, pkiDir: pkiDir, nodes: clusterNodes(), cfgs: cfgs, floor: floor.took, together: together, r: r}
	defer powerOff(c.nodes) // before the namespace goes: QEMU runs inside it
	if c.kube, err = cluster.FailoverClient(admin, cluster.ThreeNodes().MasterIPs(), seg.DialContext, clusterLog); err != nil {
		return err
	}
	if c.masters, err = masterClients(admin, seg.DialContext); err != nil {
		return err
	}
	if err := c.timeJoins(ctx); err != nil {
		return err
	}
	if err := r.write(o.results); err != nil { // keep the joins if the power cut fails
		return err
	}
	if err := c.timePowerCut(ctx); err != nil {
		return err
	}
	if err := r.write(o.results); err != nil { // keep the power cut if the lifecycle fails
		return err
	}
	return c.timeLifecycle(ctx)
}

// clusterRun is one run of the cluster part: its site's machines on a
// namespace's bridge, their configs, a client through the namespace, and
// the floor its figures go beside.
type clusterRun struct {
	o      options
	seg    *netns.Net
	dir    string
	pkiDir string
	nodes  []*clusterNode
	cfgs   map[string][]byte
	// together is the last login prompt of the plain boots of every
	// machine's shape at once: the floor under the contention of a
	// whole-cluster power cut (three vCPUs on this host's cores).
	together time.Duration
	kube     kubernetes.Interface // through the admin kubeconfig's current context (m1)
	// masters has a client per master (each context of the admin
	// kubeconfig), for what any apiserver can answer.
	masters []masterClient
	floor   time.Duration
	r       *report
}

// timeJoins powers on m1, m2 and w1 together, as an operator powers on a
// site, and times m1's bootstrap, the joins and every Node Ready: m2
// waits for m1's cluster to settle before it joins etcd, w1's kubelet
// registers as soon as an apiserver answers.
func (c *clusterRun) timeJoins(ctx context.Context) error {
	nodes, floor := c.nodes, c.floor
	m1, m2, w1 := nodes[0], nodes[1], nodes[2]
	for _, n := range []*clusterNode{m1, m2, w1} {
		if err := c.start(n); err != nil {
			return err
		}
	}
	type result struct {
		at  time.Time
		err error
	}
	m1done := make(chan result, 1)
	go func() {
		at, err := waitRoleDone(ctx, m1, "bootstrapped")
		m1done <- result{at, err}
	}()
	got, err := settle(ctx, c.masters, []*clusterNode{m2, w1}, "joined", time.Time{})
	if err != nil {
		return fmt.Errorf("joining m2 and w1: %w", err)
	}
	m2done := got.done["m2"]
	r := <-m1done
	if r.err != nil {
		return r.err
	}
	boot := r.at
	c.r.add(clusterTitle, clusterHead,
		ratioRow("m1 power-on to `done role=genesis (bootstrapped`", boot.Sub(m1.on), floor, 0, "m2 and w1 powered on beside it"),
		ratioRow("**master join**: m2 power-on to `done role=master (joined`", m2done.Sub(m2.on), floor, 0,
			"powered on with m1: it waits for m1's cluster to settle"),
		ratioRow("w1 power-on to `done role=worker (joined`", got.done["w1"].Sub(w1.on), floor, 0, "powered on with m1: its kubelet waits for an apiserver; stamped at its first Ready"),
		ratioRow("**all Ready**: power-on of the three to the three Nodes Ready", got.ready.Sub(m1.on), floor, goalAllReady,
			"as the bench sees them through the namespace"))
	c.r.addTimeline("cluster", clusterTimeline, c.timelineRows(func(n *clusterNode) string {
		if n.Role == nodefile.RoleGenesis {
			return "bootstrap"
		}
		return "join"
	})...)
	return nil
}

// timelineRows are each machine's steps on its current boot's console,
// each row named by the machine and what the boot was.
func (c *clusterRun) timelineRows(boot func(*clusterNode) string) []timeline.Row {
	var rows []timeline.Row
	for _, n := range c.nodes {
		rows = append(rows, stepsRow(fmt.Sprintf("%s (%s): %s", n.Name, n.Role, boot(n)), n.Console()))
	}
	return rows
}

// timePowerCut waits for the cluster to settle as the scenario checks it
// before its cut, pulls every plug at once, boots every machine again
// with no config, and times the restart to every Node Ready with a
// heartbeat from after the restart, and to every `restored` line.
func (c *clusterRun) timePowerCut(ctx context.Context) error {
	nodes, floor := c.nodes, c.floor
	if err := c.waitSettled(ctx); err != nil {
		return fmt.Errorf("before the power cut: %w", err)
	}
	clusterLog("whole-cluster power cut: m1, m2 and w1 killed at once, booted again with no config")
	for _, n := range nodes {
		n.PowerCut()
	}
	since := time.Now().Add(-5 * time.Second) // guest clocks start from the host's RTC
	for _, n := range nodes {
		n.Ignition = nil
		if err := n.Restart(); err != nil {
			return fmt.Errorf("%s: booting after the power cut: %w", n.Name, err)
		}
		n.on = poweredOn(n.VM)
	}
	restart := nodes[0].on
	got, err := settle(ctx, c.masters, nodes, "restored", since)
	if err != nil {
		return fmt.Errorf("after the power cut: %w", err)
	}
	back := got.ready.Sub(restart)
	rows := []row{ratioRow("**power cut**: restart to the three Nodes Ready again", back, floor, goalAfterCut,
		fmt.Sprintf("every VM killed at once, booted with no config; heartbeats from restart − 5 s on, as the QEMU scenario does; "+
			"%.2f× the three machines' plain boots at once (%s to the last login prompt)", back.Seconds()/c.together.Seconds(), secs(c.together)))}
	var last time.Time
	for _, n := range nodes {
		rows = append(rows, ratioRow(fmt.Sprintf("power cut: %s restart to `done role=%s (restored`", n.Name, n.Role),
			got.done[n.Name].Sub(n.on), floor, 0, ""))
		if got.done[n.Name].After(last) {
			last = got.done[n.Name]
		}
	}
	rows = append(rows, ratioRow("power cut: restart to the last `restored` line", last.Sub(restart), floor, 0, ""))
	c.r.add(clusterTitle, clusterHead, rows...)
	c.r.addTimeline("cluster", clusterTimeline, c.timelineRows(func(*clusterNode) string { return "after the power cut" })...)
	c.keepCutLogs(ctx)
	return nil
}

// keepCutLogs writes, for reading where the restart's time went, the
// masters' etcd and apiserver logs as the apiserver serves them and each
// machine's journal of this boot and of the boot before it (the join:
// where a worker waited minutes for its pod CIDR), read from its state
// disk while it runs (a copy, its ext4 journal replayed), into the
// image's bench-logs/cluster. What cannot be read is reported and
// skipped.
func (c *clusterRun) keepCutLogs(ctx context.Context) {
	logs := filepath.Join(c.o.out, "bench-logs", "cluster")
	var pods []string
	for _, n := range c.nodes {
		if n.Role != nodefile.RoleWorker {
			pods = append(pods, "etcd-"+n.Name, "kube-apiserver-"+n.Name)
		}
	}
	keepPodLogs(ctx, c.kube, logs, "cut-", pods...)
	for _, n := range c.nodes {
		keepJournal(ctx, filepath.Join(c.dir, n.Name+"-state.qcow2"), map[int]string{
			0:  filepath.Join(logs, "cut-"+n.Name+"-journal.log"),
			-1: filepath.Join(logs, "join-"+n.Name+"-journal.log"),
		})
	}
}

// waitSettled waits, untimed, for what the scenario checks before its power
// cut: every kube-system pod running and etcd with two voting members, so
// the cut hits a settled cluster, not one still starting pods or
// promoting m2's etcd.
func (c *clusterRun) waitSettled(ctx context.Context) error {
	what := fmt.Sprintf("at least %d kube-system pods running", cluster.ThreeNodes().KubeSystemPods())
	clusterLog("waiting up to %s for %s", clusterSettle, what)
	if err := retry.Wait(ctx, what, clusterSettle, clusterLog, func(ctx context.Context) error {
		return clustercheck.KubeSystemRunning(ctx, c.kube, cluster.ThreeNodes().KubeSystemPods(), time.Time{})
	}); err != nil {
		return err
	}
	return c.waitVoters(ctx)
}

// waitVoters waits for etcd with two voting members, both started.
func (c *clusterRun) waitVoters(ctx context.Context) error {
	what := "etcd: two voting members, no learner"
	clusterLog("waiting up to %s for %s", clusterSettle, what)
	return retry.Wait(ctx, what, clusterSettle, clusterLog, func(ctx context.Context) error {
		m1, _, _ := strings.Cut(cluster.M1Addr, "/")
		members, err := cluster.EtcdMembers(ctx, c.cfgs["m1"], "https://"+m1+":2379", c.seg.DialContext)
		if err != nil {
			return err
		}
		if len(members) != 2 || slices.ContainsFunc(members, func(m cluster.EtcdMember) bool { return m.IsLearner || m.Name == "" }) {
			return fmt.Errorf("members %+v", members)
		}
		return nil
	})
}

// settledAt is when each awaited machine showed its done line, and when
// the bench saw every Node Ready.
type settledAt struct {
	done  map[string]time.Time
	ready time.Time
}

// settle waits, side by side, for each of waiting's done lines (ended
// how) and for the three Nodes Ready with a heartbeat at since or later.
// The first failure stops the other waits and is returned.
func settle(ctx context.Context, masters []masterClient, waiting []*clusterNode, how string, since time.Time) (settledAt, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := settledAt{done: map[string]time.Time{}}
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	record := func(name string, at time.Time, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil && first == nil:
			first = err
			cancel()
		case err == nil && name == "":
			s.ready = at
		case err == nil:
			s.done[name] = at
		}
	}
	for _, n := range waiting {
		wg.Go(func() {
			at, err := waitRoleDone(ctx, n, how)
			record(n.Name, at, err)
		})
	}
	wg.Go(func() {
		err := allReady(ctx, masters, since)
		record("", time.Now(), err)
	})
	wg.Wait()
	return s, first
}

// allReady polls, through the namespace, until m1, m2 and w1 are Ready
// with a kubelet heartbeat at since or later, as any master's apiserver
// reports them. After a power cut the masters start their apiservers in
// turn, so asking m1's alone timed m1's turn, not the Nodes; and every
// master is asked by its own poll, side by side, because an apiserver
// that has bound its port but does not serve yet holds a request until
// its TLS handshake times out (10 s), which asked in turn delayed the
// answer of the master that served. Each change of a Node's Ready
// condition is logged as the first poll to see it saw it.
func allReady(ctx context.Context, masters []masterClient, since time.Time) error {
	what := "Nodes m1, m2, w1 Ready"
	if !since.IsZero() {
		what += " with a heartbeat since " + since.Format(time.TimeOnly)
	}
	clusterLog("waiting up to %s for %s, through each master's apiserver side by side", clusterBoot, what)
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen := readySeen{start: time.Now(), last: map[string]string{}}
	done := make(chan error, len(masters))
	for _, m := range masters {
		go func() {
			done <- retry.Wait(ctx, what+" through "+m.context, clusterBoot, clusterLog, func(ctx context.Context) error {
				return threeReady(ctx, m.kube, since, func(n *corev1.Node) { seen.note(m.context, n) })
			})
		}()
	}
	var errs []error
	for range masters {
		err := <-done
		if err == nil {
			return nil // the other polls end with ctx
		}
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	if parent.Err() == nil {
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		for _, m := range masters {
			clusterLog("the cluster when the wait failed, through %s:\n%s", m.context, clustercheck.Describe(dctx, m.kube))
		}
	}
	return err
}

// readySeen logs each change of a Node's Ready condition (status,
// reason, message, heartbeat) once, as the first master's poll to see it.
type readySeen struct {
	start time.Time
	mu    sync.Mutex
	last  map[string]string
}

func (r *readySeen) note(through string, n *corev1.Node) {
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		now := fmt.Sprintf("Ready=%s heartbeat %s %s %s", c.Status, c.LastHeartbeatTime.UTC().Format(time.TimeOnly), c.Reason, c.Message)
		r.mu.Lock()
		changed := r.last[n.Name] != now
		r.last[n.Name] = now
		r.mu.Unlock()
		if changed {
			clusterLog("%s +%.1fs (%s) through %s: %s", n.Name, time.Since(r.start).Seconds(), time.Now().UTC().Format(time.TimeOnly), through, now)
		}
	}
}

// threeReady is nil once m1, m2 and w1 are Ready with a heartbeat at
// since or later, as kube reports them; saw is given each Node read. The
// Nodes are read in one list: an apiserver that has just become ready
// answers every kubelet, controller and anchor at once, and three reads
// in turn there take seconds each: the bench would see a Node's Ready
// long after its kubelet posted it.
func threeReady(ctx context.Context, kube kubernetes.Interface, since time.Time, saw func(*corev1.Node)) error {
	list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range list.Items {
		saw(&list.Items[i])
	}
	for _, name := range []string{"m1", "m2", "w1"} {
		i := slices.IndexFunc(list.Items, func(n corev1.Node) bool { return n.Name == name })
		if i < 0 {
			return fmt.Errorf("node %s is not registered", name)
		}
		if err := clustercheck.NodeIsReady(&list.Items[i], since); err != nil {
			return err
		}
	}
	return nil
}

// masterClient is a client through one context of the admin kubeconfig:
// one master's apiserver.
type masterClient struct {
	context string
	kube    kubernetes.Interface
}

// masterClients has a client for each context of the admin kubeconfig,
// in the order of their names, each dialling through dial.
func masterClients(admin []byte, dial func(ctx context.Context, network, addr string) (net.Conn, error)) ([]masterClient, error) {
	kc, err := clientcmd.Load(admin)
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	var out []masterClient
	for _, name := range slices.Sorted(maps.Keys(kc.Contexts)) {
		kube, _, err := cluster.NetnsClient(admin, name, dial)
		if err != nil {
			return nil, err
		}
		out = append(out, masterClient{context: name, kube: kube})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("admin kubeconfig: no context")
	}
	return out, nil
}

// waitRoleDone waits for n's role to end on its console, fails unless it
// ended how (bootstrapped, joined, restored), and returns when the line
// was seen.
func waitRoleDone(ctx context.Context, n *clusterNode, how string) (time.Time, error) {
	clusterLog("waiting up to %s for %s's `done role=%s (%s` (console: %s)", clusterBoot, n.Name, n.Role, how, n.ConsolePath(n.Boot()))
	line, err := cluster.WaitRoleDone(ctx, n.VM, n.Role, how, clusterBoot)
	at := time.Now()
	if err != nil {
		if ctx.Err() == nil {
			clusterLog("%s console, last lines:\n%s", n.Name, n.Tail(40))
		}
		return at, err
	}
	clusterLog("%s: %s (%s after power-on)", n.Name, line, at.Sub(n.on).Round(time.Second))
	return at, nil
}

// start makes n's tap and blank state disk and boots it from the ISO
// with its config, as the scenario does.
func (c *clusterRun) start(n *clusterNode) error {
	tap := "tap-" + n.Name
	if err := c.seg.AddTap(tap); err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	disk := filepath.Join(c.dir, n.Name+"-state.qcow2")
	if err := createQcow2(disk, "8G"); err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	v, err := vm.Start(vm.Config{Name: n.Name, Dir: filepath.Join(c.dir, n.Name), Firmware: vm.BIOS, Boot: vm.BootISO, Direct: true,
		MemoryMiB: n.MemoryMiB, CPUs: n.CPUs, KVM: vm.KVMUsable(), MAC: n.MAC, ISO: abs(filepath.Join(c.o.out, "node.iso")),
		Disks: []vm.Disk{{Path: disk, Format: "qcow2"}}, Netns: c.seg.Name, Tap: tap, Ignition: c.cfgs[n.Name]})
	if err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	n.VM, n.on = v, poweredOn(v)
	clusterLog("%s (%s) powered on: %d vCPU, %d MiB", n.Name, n.Role, n.CPUs, n.MemoryMiB)
	return nil
}

// powerOff kills every VM of the part that runs.
func powerOff(nodes []*clusterNode) {
	for _, n := range nodes {
		if n.VM != nil {
			n.PowerCut()
		}
	}
	clusterLog("every VM powered off")
}

// timePlainTogether boots the ISO plainly (scenarioPlain) in the shape
// of each of nodes, all at once, and returns the last of their times from
// power-on to the login prompt: what the machine's cores give three
// booting VMs at once, the floor beside the whole-cluster power cut.
func timePlainTogether(ctx context.Context, o options, dir string, nodes []*clusterNode) (time.Duration, error) {
	var vms []*vm.VM
	defer func() {
		for _, v := range vms {
			v.PowerCut()
		}
	}()
	for _, n := range nodes {
		cfg, cleanup, err := withShape(scenarioPlain, n.MemoryMiB, n.CPUs)(o, dir, true)
		if err != nil {
			return 0, err
		}
		defer cleanup()
		cfg.Name, cfg.Dir, cfg.KVM = "plain-"+n.Name, filepath.Join(dir, n.Name), vm.KVMUsable()
		v, err := vm.Start(cfg)
		if err != nil {
			return 0, fmt.Errorf("%s's shape: %w", n.Name, err)
		}
		vms = append(vms, v)
	}
	var last time.Duration
	for i, v := range vms {
		if _, err := v.WaitLine(ctx, vm.LoginPrompt, 8*time.Minute); err != nil {
			return 0, fmt.Errorf("%s's shape: %w (console: %s)", nodes[i].Name, err, v.ConsolePath(v.Boot()))
		}
		var at time.Duration
		if marks := timeline.Extract([]timeline.Step{{Name: "login prompt", Line: vm.LoginPrompt}}, v.Console()); len(marks) == 1 {
			at = marks[0].At
		}
		clusterLog("plain boot in %s's shape (%d vCPU, %d MiB), beside the others: login prompt %.1f s after power-on", nodes[i].Name, nodes[i].CPUs, nodes[i].MemoryMiB, at.Seconds())
		last = max(last, at)
	}
	return last, nil
}

// poweredOn is when the current boot of v started.
func poweredOn(v *vm.VM) time.Time { return time.Now().Add(-v.Uptime()) }

// createQcow2 makes a blank qcow2 disk of size.
func createQcow2(path, size string) error {
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", path, size).CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img create %s: %w: %s", path, err, out)
	}
	return nil
}

// withShape gives a boot path's VM memMiB of memory and cpus vCPUs
// (timeBoot's default is 2), so a floor has the shape of the machine it
// is beside.
func withShape(setup func(options, string, bool) (vm.Config, func(), error), memMiB, cpus int) func(options, string, bool) (vm.Config, func(), error) {
	return func(o options, dir string, plain bool) (vm.Config, func(), error) {
		cfg, cleanup, err := setup(o, dir, plain)
		cfg.MemoryMiB, cfg.CPUs = memMiB, cpus
		return cfg, cleanup, err
	}
}

func clusterLog(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "== cluster: "+format+"\n", args...)
}
