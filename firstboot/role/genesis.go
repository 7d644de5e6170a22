package role

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// errClusterExists sends a genesis node whose cluster already exists
// (it was re-imaged, or booted again with the same config) to the
// master join instead of a second bootstrap.
var errClusterExists = errors.New("cluster already exists")

// runGenesis bootstraps the cluster once and on every later boot lets
// the kubelet bring the control plane back from the persisted static
// pods. When another master's etcd answers before this node ever
// bootstrapped, the cluster exists: the node joins it as a master.
//
// A genesis machine that joined as a master (its master/etcd-join is
// stamped) is a master on every later boot: after a whole-cluster power
// cut no other master's etcd may answer yet, and its own etcd member is
// one the others need for their quorum.
func (n *Node) runGenesis(ctx context.Context) (Result, error) {
	if n.stamped("master/etcd-join") && !n.stamped("genesis/bootstrap") {
		n.Log("genesis: this machine joined the cluster as a master; it comes back as one")
		return n.runRole(ctx, nodefile.RoleMaster, "joined", n.masterPhases())
	}
	res, err := n.runRole(ctx, nodefile.RoleGenesis, "bootstrapped", n.genesisPhases())
	if errors.Is(err, errClusterExists) {
		n.Log("genesis: %s; joining as a master", clusterExistsReason(err))
		return n.runRole(ctx, nodefile.RoleMaster, "joined", n.masterPhases())
	}
	return res, err
}

// clusterExistsReason is the part of a cluster-absent error that says
// which master answered: "cluster already exists (m2 answers)".
func clusterExistsReason(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, errClusterExists.Error()); i >= 0 {
		return msg[i:]
	}
	return msg
}

func (n *Node) genesisPhases() []phase {
	notBootstrapped := func() bool { return !n.stamped("genesis/bootstrap") }
	return []phase{
		{Name: "cluster-absent", RunIf: notBootstrapped, Run: n.requireNoCluster},
		{Name: "start", Run: n.startControlPlane},
		// The pod CIDR is claimed as soon as the apiserver serves and the
		// kubelet has registered, before the apiserver's post-start hooks
		// are done: the agent is in system:masters, so it needs none of the
		// RBAC defaults, and the CNI file it writes is what the Node's
		// Ready waits for.
		{Name: "pod-cidr", Once: true, Run: n.claimPodCIDR},
		{Name: "apiserver", Run: n.waitGenesisAPIServer},
		{Name: "controllers", Once: true, Run: n.startControllers},
		{Name: "bootstrap", Once: true, Run: n.recordBootstrapped},
		{Name: "add-ons", Once: true, Run: n.applyAddOns},
		{Name: "label", Once: true, Run: n.labelSelf},
		{Name: "node-ready", Run: n.waitSelfReady},
		{Name: "publish-version", Run: n.publishVersion},
		{Name: "validate", Once: true, Run: n.validate},
	}
}

// requireNoCluster waits until every other master is ruled out or one
// answers as an etcd member (errClusterExists: the node joins it). A
// master is ruled out by a refused connection, an unreachable address or
// its waiting banner (beacon.go); one that cannot be ruled out (a
// timeout: a busy machine, a port still blocked, a slow link) keeps this
// node from bootstrapping, and it asks again, saying every
// retry.Report whom it waits for. The wait has no bound: the way
// out is on the console (that master answering, or the path to it
// fixed). Only a proven foreign PKI ends it.
func (n *Node) requireNoCluster(ctx context.Context) error {
	cfg, err := n.etcdClientTLS()
	if err != nil {
		return err
	}
	var last surveyed
	var lastReport time.Time
	err = retry.Wait(ctx, "every other master ruled out", retry.NoBound, nil, func(ctx context.Context) error {
		last = n.survey(ctx, cfg)
		switch {
		case len(last.answering) > 0:
			return retry.Final(fmt.Errorf("%w (%s answers)", errClusterExists, last.answering[0].Name))
		case last.foreign() != nil:
			return retry.Final(fmt.Errorf("%w: %w: this node and that master were given different PKIs (another kiln gen run?); "+
				"boot every machine of the site with configs from one kiln gen run, or re-image the site's masters to start over", errRefused, last.foreign()))
		case len(last.doubts) > 0:
			if time.Since(lastReport) >= retry.Report {
				lastReport = time.Now()
				n.Log("genesis: waiting to rule out %s; not bootstrapping while a cluster may exist (power that master on, or fix the path to its etcd port)", last.waitingOn())
			}
			return last.doubt()
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, m := range last.waiting {
		n.Log("genesis: master %s answers as waiting to join, with no etcd member: ruled out", m.Name)
	}
	if others := n.otherMasters(); len(others) > 0 {
		n.Log("no etcd member runs at the site's other masters (%d): bootstrapping is safe", len(others))
	}
	return nil
}

// startControlPlane writes the control plane from the membership record,
// creating a new cluster's record on the first boot. A new cluster's etcd
// and apiserver start at once, its controller-manager and scheduler once
// the apiserver is ready (phase controllers); one that existed before (a
// later boot, or a master whose member just joined) starts in order.
func (n *Node) startControlPlane(ctx context.Context) error {
	rec, err := etcdmember.Read(n.Root)
	if errors.Is(err, etcdmember.ErrNone) && n.file.Role == nodefile.RoleGenesis && !n.stamped("genesis/bootstrap") {
		rec = etcdmember.Genesis(n.file.Name, n.file.Address)
		err = etcdmember.Write(n.Root, rec)
	}
	if err != nil {
		return err
	}
	if rec.State != etcdmember.StateExisting {
		return n.startNode(ctx, n.params(rec), controllerPods)
	}
	n.etcdPeers = len(rec.Peers) > 1
	etcd, closeEtcd, err := n.ownEtcd()
	if err != nil {
		return err
	}
	defer closeEtcd()
	kube, err := n.apiAt(n.file.Address)
	if err != nil {
		return err
	}
	return n.startInOrder(ctx, n.params(rec), n.restartStages(rec, etcd, kube))
}

// controllerPods are the static pods that start once their node's
// apiserver is ready, on every boot.
var controllerPods = []string{"kube-controller-manager", "kube-scheduler"}

// startControllers writes a new cluster's controller-manager and
// scheduler once its apiserver is ready, as a control plane that existed
// starts them (restartStages). Started beside it on a slow one-vCPU
// genesis master, they would take the apiserver's CPU with nothing to do
// yet (the scheduler has nothing to schedule), and a controller-manager
// that exits during the apiserver's RBAC hook makes its next start wait
// out the lease the first held (2 min under timing slow) before any
// controller runs.
//
// Before that, while no controller-manager has run, the Nodes that
// registered meanwhile get their pod CIDRs (givePodCIDRs).
func (n *Node) startControllers(ctx context.Context) error {
	rec, err := etcdmember.Read(n.Root)
	if err != nil {
		return err
	}
	kube, err := n.apiAt(n.file.Address)
	if err == nil {
		err = n.givePodCIDRsFirst(ctx, kube)
	}
	if err != nil {
		n.Log("giving the registered Nodes their pod CIDRs: %v (the controller-manager allocates them)", err)
	}
	if err := n.writeStaticPods(n.params(rec), controllerPods); err != nil {
		return err
	}
	n.Log("started %s", strings.Join(controllerPods, ", "))
	return nil
}

// givePodCIDRsFirst runs givePodCIDRs unless this node's controller-manager
// may be running already (its static pod is written: a boot that stopped
// inside the controllers phase, or any later boot), and says what it gave.
func (n *Node) givePodCIDRsFirst(ctx context.Context, kube kubernetes.Interface) error {
	if _, err := os.Stat(n.path(filepath.Join(manifests.StaticPodDir, "kube-controller-manager.yaml"))); err == nil {
		return nil
	}
	podNet, err := netip.ParsePrefix(n.file.Cluster.PodCIDR)
	if err != nil {
		return err
	}
	given, err := givePodCIDRs(ctx, kube, podNet)
	for _, name := range slices.Sorted(maps.Keys(given)) {
		n.Log("pod CIDR %s given to node %s, registered before the controller-manager runs (its allocator takes it as occupied)", given[name], name)
	}
	return err
}

// waitGenesisAPIServer waits for the apiserver as waitOwnAPIServer does,
// and meanwhile gives the Nodes that register their pod CIDRs
// (givePodCIDRsFirst, quietly: the wait says what fails). On a slow
// machine a new cluster's apiserver serves tens of seconds before its
// post-start hooks are done; nodes powered on beside the genesis node
// register in that time, and given their blocks only once the
// controller-manager runs they would be Ready only then. Each try is
// bounded, so a busy apiserver does not hold up the wait's next poll.
func (n *Node) waitGenesisAPIServer(ctx context.Context) error {
	return n.waitAPIServer(ctx, func(ctx context.Context, kube kubernetes.Interface) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = n.givePodCIDRsFirst(ctx, kube)
	})
}

// recordBootstrapped marks the membership existing once the apiserver
// answered (its etcd runs), in the record and in etcd's configuration
// file: nothing renders a new cluster again. The static pod names only
// the file, so the running etcd is not restarted for it.
func (n *Node) recordBootstrapped(context.Context) error {
	rec, err := etcdmember.Read(n.Root)
	if err != nil {
		return err
	}
	rec.State = etcdmember.StateExisting
	if err := etcdmember.Write(n.Root, rec); err != nil {
		return err
	}
	conf, err := manifests.EtcdConfig(n.params(rec))
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(n.path(manifests.EtcdConfigPath), conf, 0o644, nil)
}

// waitOwnAPIServer waits for this node's own apiserver to be ready. A
// control plane that joins or comes back beside other etcd members finds
// the cluster's RBAC defaults in place, so the apiserver's hook that
// reconciles them again is not waited for (see rbacAside).
func (n *Node) waitOwnAPIServer(ctx context.Context) error { return n.waitAPIServer(ctx, nil) }

// waitAPIServer is waitOwnAPIServer's wait, running meanwhile (when set)
// after every poll the apiserver is not ready yet.
func (n *Node) waitAPIServer(ctx context.Context, meanwhile func(context.Context, kubernetes.Interface)) error {
	kube, err := n.apiAt(n.file.Address)
	if err != nil {
		return err
	}
	except := n.rbacAside()
	if len(except) > 0 {
		n.Log("the cluster has its default RBAC objects: the apiserver is healthy without its %s check", clustercheck.RBACDefaultsHook)
	}
	return retry.Wait(ctx, "apiserver healthy on "+n.file.Address, n.Wait, n.Log, func(ctx context.Context) error {
		err := clustercheck.APIServerReady(ctx, kube, except...)
		if err != nil && meanwhile != nil {
			meanwhile(ctx, kube)
		}
		return err
	})
}

// rbacAside are the readiness checks this boot does not wait for: the
// RBAC defaults' hook, on a master beside other etcd members (one that
// joins a cluster, or comes back in a multi-master one). The hook
// reconciles about 150 objects one quorum read at a time, and with a
// peer to ask each read takes about a second on loaded masters: minutes
// on a joining master, and on masters restored after a whole-cluster
// cut, whose controller-manager and scheduler would wait all that
// while. The cluster has those defaults already, and the apiserver
// serves with them meanwhile. A lone master waits for the whole /readyz:
// its reads need no peer, so the hook is short, and a controller-manager
// and scheduler started beside it only slow the genesis's way to Ready.
func (n *Node) rbacAside() []string {
	if n.etcdPeers {
		return []string{clustercheck.RBACDefaultsHook}
	}
	return nil
}
