package role

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// controlPlane owns this node's control plane as static pods: its start
// from the membership record (a new cluster's at once, one that existed
// in order: etcd quorum, the apiserver's turn, the controllers), a new
// cluster's controllers and record, and the wait for its own apiserver.
type controlPlane struct {
	env   nodeEnv
	files nodeFiles
	api   clients
	cni   *podNetwork
	wait  time.Duration
	port  int // etcd's client port
	// quorum, leads and members are Node.EtcdQuorum, EtcdLeads and
	// EtcdMembers: nil means a client of the member at the node's
	// address (ownEtcd).
	quorum  func(ctx context.Context) error
	leads   func(ctx context.Context) (bool, error)
	members func(ctx context.Context) ([]etcdmember.Member, error)
	// etcdPeers: this boot's control plane has other etcd members (its
	// member joined a cluster, on this boot or before, or others joined
	// its cluster), so its apiserver starts beside the cluster's RBAC
	// defaults and every quorum read waits on a peer.
	etcdPeers bool
}

// stage is one step of a control plane brought back in order: its static
// pods start once what it waits for answers, or once bound (0: the node's
// Wait) has passed.
type stage struct {
	waitFor string // for the console: "etcd quorum on 10.0.0.1"
	ready   func(context.Context) error
	bound   time.Duration
	pods    []string
}

// apiserverTurnBound is how long a master whose etcd member does not lead
// waits for another master's apiserver before it starts its own anyway.
const apiserverTurnBound = 5 * time.Minute

// restartStages are the stages after etcd of a control plane that existed
// before this boot: etcd quorum; the apiserver in its turn (the etcd
// leader's node first, every other master once an apiserver is ready);
// the controller-manager and scheduler once the local apiserver is ready
// (beside other etcd members, its RBAC defaults' hook aside: rbacAside).
// Started all at once after a whole-cluster power cut, they compete for
// the CPU of machines that are all starting: apiservers then spend
// minutes in their post-start hooks, one can exit when its IP allocation
// check times out, and with three masters every apiserver can fail its
// rbac/bootstrap-roles hook (it must reconcile about 140 objects within
// 30 s) and restart, over and over.
//
// A master alone in its site and in its membership record has no turn to
// wait for: its apiserver starts beside etcd, so the apiserver's own
// start (most of its CPU on a restart) overlaps etcd's, and the
// apiserver waits for its etcd to serve.
func (cp *controlPlane) restartStages(rec etcdmember.Membership, etcd localEtcd, kube kubernetes.Interface) []stage {
	quorum := stage{waitFor: "etcd quorum on " + cp.env.file.Address, ready: func(ctx context.Context) error {
		if err := etcd.quorum(ctx); err != nil {
			return err
		}
		cp.notePeers(ctx, rec, etcd.members)
		return nil
	}}
	healthy := stage{waitFor: "apiserver healthy on " + cp.env.file.Address, pods: controllerPods,
		ready: func(ctx context.Context) error {
			return clustercheck.APIServerReady(ctx, kube, cp.rbacAside()...)
		}}
	if len(cp.env.otherMasters()) == 0 && len(rec.Peers) == 1 {
		cp.env.log("the only master of this site: kube-apiserver starts beside etcd")
		return []stage{quorum, healthy}
	}
	turn := stage{waitFor: "the apiserver's turn on " + cp.env.file.Address + " (the etcd leader's master starts first, the others once an apiserver is ready)",
		ready: cp.apiserverTurn(etcd.leads), bound: min(cp.wait, apiserverTurnBound), pods: []string{"kube-apiserver"}}
	return []stage{quorum, turn, healthy}
}

// notePeers sets etcdPeers when the cluster, read once it has quorum,
// has voting members beside this one that the membership record does not
// name: the genesis node's record names itself alone, however many
// masters joined since, and without the peers noted its restored
// controller-manager would wait minutes for the RBAC defaults' hook
// after its apiserver serves, while the joined master's does not. A
// failed list keeps the record's answer.
func (cp *controlPlane) notePeers(ctx context.Context, rec etcdmember.Membership, members func(context.Context) ([]etcdmember.Member, error)) {
	if cp.etcdPeers || members == nil {
		return
	}
	ms, err := members(ctx)
	if err != nil {
		cp.env.log("the etcd member list: %s (going by the membership record: %d member(s))", retry.OneLine(err), len(rec.Peers))
		return
	}
	voting := 0
	for _, m := range ms {
		if !m.IsLearner {
			voting++
		}
	}
	if voting > 1 {
		cp.etcdPeers = true
		cp.env.log("etcd has %d voting members (the membership record names %d): this apiserver starts beside the cluster's RBAC defaults", voting, len(rec.Peers))
	}
}

// apiserverTurn is nil once this node may start its apiserver: its etcd
// member leads the cluster, or another master's apiserver is ready, its
// RBAC defaults' hook aside (that hook waits on etcd's quorum reads, not
// on the CPU, and can keep the leader's apiserver unhealthy for longer
// than the turn's bound).
// One apiserver at a time runs its costly start, while the machines that
// wait run etcd alone.
func (cp *controlPlane) apiserverTurn(leads func(context.Context) (bool, error)) func(context.Context) error {
	return func(ctx context.Context) error {
		lead, err := leads(ctx)
		if err == nil && lead {
			return nil
		}
		why := "this member does not lead etcd"
		if err != nil {
			why = "the etcd leader unknown: " + retry.OneLine(err)
		}
		m, doubt := firstMaster(ctx, cp.env.otherMasters(), cp.api.kubeAt, func(ctx context.Context, kube kubernetes.Interface, _ nodefile.Member) error {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return clustercheck.APIServerReady(ctx, kube, clustercheck.RBACDefaultsHook)
		})
		if doubt != nil {
			return fmt.Errorf("%s, and no other master's apiserver is ready (%s)", why, retry.OneLine(doubt))
		}
		cp.env.log("master %s's apiserver is ready: starting this one", m.Name)
		return nil
	}
}

// startInOrder starts the kubelet with etcd and every static pod no stage
// holds, then each stage's pods once its wait is over. A wait that ends
// without an answer (its bound passed) starts the stage's pods anyway:
// they serve once what they need does, as they would have started all at
// once, and the node never stays without its apiserver.
func (cp *controlPlane) startInOrder(ctx context.Context, p manifests.Params, stages []stage) error {
	var held []string
	for _, s := range stages {
		held = append(held, s.pods...)
	}
	if err := cp.files.takeOutStaticPods(held); err != nil {
		return err
	}
	if err := cp.files.startNode(ctx, p, held); err != nil {
		return err
	}
	for _, s := range stages {
		bound := s.bound
		if bound == 0 {
			bound = cp.wait
		}
		err := retry.Wait(ctx, s.waitFor, bound, cp.env.log, s.ready)
		switch {
		case err != nil && ctx.Err() != nil:
			return err
		case len(s.pods) == 0:
			if err != nil {
				cp.env.log("going on: %s", retry.OneLine(err))
			}
			continue
		case err != nil:
			cp.env.log("starting %s anyway: %s", strings.Join(s.pods, ", "), retry.OneLine(err))
		}
		if err := cp.files.writeStaticPods(p, s.pods); err != nil {
			return err
		}
		cp.env.log("started %s", strings.Join(s.pods, ", "))
	}
	return nil
}

// localEtcd is what the ordered start asks this node's etcd member:
// whether it reads through quorum, and whether it leads.
type localEtcd struct {
	quorum  func(context.Context) error
	leads   func(context.Context) (bool, error)
	members func(context.Context) ([]etcdmember.Member, error) // nil: not asked
}

// ownEtcd is the check of this node's etcd member (Node.EtcdQuorum,
// EtcdLeads and EtcdMembers where set: with the first two set, the
// members are asked only if the third is), and the client to close after.
func (cp *controlPlane) ownEtcd() (localEtcd, func(), error) {
	e := localEtcd{quorum: cp.quorum, leads: cp.leads, members: cp.members}
	if e.quorum != nil && e.leads != nil {
		return e, func() {}, nil
	}
	cfg, err := cp.env.etcdClientTLS()
	if err != nil {
		return localEtcd{}, nil, err
	}
	url := "https://" + net.JoinHostPort(cp.env.file.Address, fmt.Sprint(cp.port))
	c, err := etcdmember.Dial([]string{url}, cfg)
	if err != nil {
		return localEtcd{}, nil, err
	}
	if e.quorum == nil {
		e.quorum = c.Quorum
	}
	if e.leads == nil {
		e.leads = func(ctx context.Context) (bool, error) { return c.Leads(ctx, url) }
	}
	if e.members == nil {
		e.members = c.MemberList
	}
	return e, func() { c.Close() }, nil
}
