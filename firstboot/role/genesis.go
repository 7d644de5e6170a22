package role

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"
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
	if env := n.units().env; env.stamped("master/etcd-join") && !env.stamped("genesis/bootstrap") {
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
	u := n.units()
	notBootstrapped := func() bool { return !u.env.stamped("genesis/bootstrap") }
	return []phase{
		{Name: "cluster-absent", RunIf: notBootstrapped, Run: u.survey.requireNoCluster},
		// A lost cluster's snapshot is restored once no other master can
		// hold a cluster, and before etcd first starts (restore.go).
		{Name: "restore", RunIf: u.env.restoring, Run: u.plane.restoreEtcd},
		{Name: "start", Run: u.plane.start},
		// The pod CIDR is claimed as soon as the apiserver serves and the
		// kubelet has registered, before the apiserver's post-start hooks
		// are done: the agent is in system:masters, so it needs none of the
		// RBAC defaults, and the CNI file it writes is what the Node's
		// Ready waits for.
		{Name: "pod-cidr", Once: true, Run: u.cni.claimPodCIDR},
		{Name: "apiserver", Run: u.plane.waitGenesisAPIServer},
		{Name: "controllers", Once: true, Run: u.plane.startControllers},
		{Name: "bootstrap", Once: true, Run: u.plane.recordBootstrapped},
		{Name: "identity", Once: true, Run: u.plane.recordIdentity},
		{Name: "add-ons", Once: true, Run: u.master.applyAddOns},
		{Name: "label", Once: true, Run: u.master.labelSelf},
		{Name: "node-ready", Run: u.master.waitSelfReady},
		{Name: "publish-version", Run: u.kubelet.publishVersion},
		{Name: "validate", Once: true, Run: u.master.validate},
		{Name: "role-done", Run: u.kubelet.publishRoleDone},
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
func (sv surveyor) requireNoCluster(ctx context.Context) error {
	cfg, err := sv.env.etcdClientTLS()
	if err != nil {
		return err
	}
	var last surveyed
	var lastReport time.Time
	err = retry.Wait(ctx, "every other master ruled out", retry.NoBound, nil, func(ctx context.Context) error {
		last = sv.survey(ctx, cfg)
		switch {
		case len(last.answering) > 0:
			return retry.Final(fmt.Errorf("%w (%s answers)", errClusterExists, last.answering[0].Name))
		case last.foreign() != nil:
			return retry.Final(fmt.Errorf("%w: %w: this node and that master were given different PKIs (another kiln gen run?); "+
				"boot every machine of the site with configs from one kiln gen run, or re-image the site's masters to start over", errRefused, last.foreign()))
		case len(last.doubts) > 0:
			if time.Since(lastReport) >= retry.Report {
				lastReport = time.Now()
				sv.env.log("genesis: waiting to rule out %s; not bootstrapping while a cluster may exist (power that master on, or fix the path to its etcd port)", last.waitingOn())
			}
			return last.doubt()
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, m := range last.waiting {
		sv.env.log("genesis: master %s answers as waiting to join, with no etcd member: ruled out", m.Name)
	}
	if others := sv.env.otherMasters(); len(others) > 0 {
		sv.env.log("no etcd member runs at the site's other masters (%d): bootstrapping is safe", len(others))
	}
	return nil
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
func (cp *controlPlane) startControllers(ctx context.Context) error {
	rec, err := etcdmember.Read(cp.env.root)
	if err != nil {
		return err
	}
	kube, err := cp.api.kubeAt(cp.env.file.Address)
	if err == nil {
		err = cp.cni.givePodCIDRsFirst(ctx, kube)
	}
	if err != nil {
		cp.env.log("giving the registered Nodes their pod CIDRs: %v (the controller-manager allocates them)", err)
	}
	if err := cp.files.writeStaticPods(cp.env.params(rec), controllerPods); err != nil {
		return err
	}
	cp.env.log("started %s", strings.Join(controllerPods, ", "))
	return nil
}

// waitGenesisAPIServer waits for the apiserver as waitOwnAPIServer does,
// and meanwhile gives the Nodes that register their pod CIDRs
// (givePodCIDRsFirst, quietly: the wait says what fails). On a slow
// machine a new cluster's apiserver serves tens of seconds before its
// post-start hooks are done; nodes powered on beside the genesis node
// register in that time, and given their blocks only once the
// controller-manager runs they would be Ready only then. Each try is
// bounded, so a busy apiserver does not hold up the wait's next poll.
func (cp *controlPlane) waitGenesisAPIServer(ctx context.Context) error {
	return cp.waitAPIServer(ctx, func(ctx context.Context, kube kubernetes.Interface) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = cp.cni.givePodCIDRsFirst(ctx, kube)
	})
}

// recordBootstrapped marks the membership existing once the apiserver
// answered (its etcd runs), in the record and in etcd's configuration
// file: nothing renders a new cluster again. The static pod names only
// the file, so the running etcd is not restarted for it.
func (cp *controlPlane) recordBootstrapped(context.Context) error {
	rec, err := etcdmember.Read(cp.env.root)
	if err != nil {
		return err
	}
	rec.State = etcdmember.StateExisting
	if err := etcdmember.Write(cp.env.root, rec); err != nil {
		return err
	}
	conf, err := manifests.EtcdConfig(cp.env.params(rec))
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(cp.env.path(manifests.EtcdConfigPath), conf, 0o644, nil)
}
