package role

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
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
func (n *Node) restartStages(rec etcdmember.Membership, etcd localEtcd, kube kubernetes.Interface) []stage {
	quorum := stage{waitFor: "etcd quorum on " + n.file.Address, ready: func(ctx context.Context) error {
		if err := etcd.quorum(ctx); err != nil {
			return err
		}
		n.notePeers(ctx, rec, etcd.members)
		return nil
	}}
	healthy := stage{waitFor: "apiserver healthy on " + n.file.Address, pods: controllerPods,
		ready: func(ctx context.Context) error {
			return clustercheck.APIServerReady(ctx, kube, n.rbacAside()...)
		}}
	if len(n.otherMasters()) == 0 && len(rec.Peers) == 1 {
		n.Log("the only master of this site: kube-apiserver starts beside etcd")
		return []stage{quorum, healthy}
	}
	turn := stage{waitFor: "the apiserver's turn on " + n.file.Address + " (the etcd leader's master starts first, the others once an apiserver is ready)",
		ready: n.apiserverTurn(etcd.leads), bound: min(n.Wait, apiserverTurnBound), pods: []string{"kube-apiserver"}}
	return []stage{quorum, turn, healthy}
}

// notePeers sets n.etcdPeers when the cluster, read once it has quorum,
// has voting members beside this one that the membership record does not
// name: the genesis node's record names itself alone, however many
// masters joined since, and without the peers noted its restored
// controller-manager would wait minutes for the RBAC defaults' hook
// after its apiserver serves, while the joined master's does not. A
// failed list keeps the record's answer.
func (n *Node) notePeers(ctx context.Context, rec etcdmember.Membership, members func(context.Context) ([]etcdmember.Member, error)) {
	if n.etcdPeers || members == nil {
		return
	}
	ms, err := members(ctx)
	if err != nil {
		n.Log("the etcd member list: %s (going by the membership record: %d member(s))", retry.OneLine(err), len(rec.Peers))
		return
	}
	voting := 0
	for _, m := range ms {
		if !m.IsLearner {
			voting++
		}
	}
	if voting > 1 {
		n.etcdPeers = true
		n.Log("etcd has %d voting members (the membership record names %d): this apiserver starts beside the cluster's RBAC defaults", voting, len(rec.Peers))
	}
}

// apiserverTurn is nil once this node may start its apiserver: its etcd
// member leads the cluster, or another master's apiserver is ready, its
// RBAC defaults' hook aside (that hook waits on etcd's quorum reads, not
// on the CPU, and can keep the leader's apiserver unhealthy for longer
// than the turn's bound).
// One apiserver at a time runs its costly start, while the machines that
// wait run etcd alone.
func (n *Node) apiserverTurn(leads func(context.Context) (bool, error)) func(context.Context) error {
	return func(ctx context.Context) error {
		lead, err := leads(ctx)
		if err == nil && lead {
			return nil
		}
		why := "this member does not lead etcd"
		if err != nil {
			why = "the etcd leader unknown: " + retry.OneLine(err)
		}
		m, doubt := firstMaster(ctx, n.otherMasters(), n.apiAt, func(ctx context.Context, kube kubernetes.Interface, _ nodefile.Member) error {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return clustercheck.APIServerReady(ctx, kube, clustercheck.RBACDefaultsHook)
		})
		if doubt != nil {
			return fmt.Errorf("%s, and no other master's apiserver is ready (%s)", why, retry.OneLine(doubt))
		}
		n.Log("master %s's apiserver is ready: starting this one", m.Name)
		return nil
	}
}

// startInOrder starts the kubelet with etcd and every static pod no stage
// holds, then each stage's pods once its wait is over. A wait that ends
// without an answer (its bound passed) starts the stage's pods anyway:
// they serve once what they need does, as they would have started all at
// once, and the node never stays without its apiserver.
func (n *Node) startInOrder(ctx context.Context, p manifests.Params, stages []stage) error {
	var held []string
	for _, s := range stages {
		held = append(held, s.pods...)
	}
	if err := n.takeOutStaticPods(held); err != nil {
		return err
	}
	if err := n.startNode(ctx, p, held); err != nil {
		return err
	}
	for _, s := range stages {
		bound := s.bound
		if bound == 0 {
			bound = n.Wait
		}
		err := retry.Wait(ctx, s.waitFor, bound, n.Log, s.ready)
		switch {
		case err != nil && ctx.Err() != nil:
			return err
		case len(s.pods) == 0:
			if err != nil {
				n.Log("going on: %s", retry.OneLine(err))
			}
			continue
		case err != nil:
			n.Log("starting %s anyway: %s", strings.Join(s.pods, ", "), retry.OneLine(err))
		}
		if err := n.writeStaticPods(p, s.pods); err != nil {
			return err
		}
		n.Log("started %s", strings.Join(s.pods, ", "))
	}
	return nil
}

// takeOutStaticPods removes the named pods' manifests, which the agent
// and the anchors render, from the kubelet's static pod directory before
// the kubelet starts, so that the kubelet does not start them from the
// last boot's files.
func (n *Node) takeOutStaticPods(pods []string) error {
	dir := n.path(manifests.StaticPodDir)
	removed := false
	for _, name := range pods {
		err := os.Remove(filepath.Join(dir, name+".yaml"))
		switch {
		case err == nil:
			removed = true
		case !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("taking %s out of %s until its turn: %w", name, manifests.StaticPodDir, err)
		}
	}
	if !removed {
		return nil
	}
	return atomicfile.SyncDir(dir)
}

// localEtcd is what the ordered start asks this node's etcd member:
// whether it reads through quorum, and whether it leads.
type localEtcd struct {
	quorum  func(context.Context) error
	leads   func(context.Context) (bool, error)
	members func(context.Context) ([]etcdmember.Member, error) // nil: not asked
}

// ownEtcd is the check of this node's etcd member (n.EtcdQuorum,
// n.EtcdLeads and n.EtcdMembers where set: with the first two set, the
// members are asked only if the third is), and the client to close after.
func (n *Node) ownEtcd() (localEtcd, func(), error) {
	e := localEtcd{quorum: n.EtcdQuorum, leads: n.EtcdLeads, members: n.EtcdMembers}
	if e.quorum != nil && e.leads != nil {
		return e, func() {}, nil
	}
	cfg, err := n.etcdClientTLS()
	if err != nil {
		return localEtcd{}, nil, err
	}
	url := "https://" + net.JoinHostPort(n.file.Address, fmt.Sprint(n.etcdPort()))
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
