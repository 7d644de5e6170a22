package nodeops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/contract/removednodes"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/steps"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// ErrUnknownNode is Remove's answer for a name that neither the site
// file, the cluster's Nodes nor etcd's members know.
var ErrUnknownNode = errors.New("no such node")

// DefaultTimeout bounds the drain.
const DefaultTimeout = 5 * time.Minute

// Options are the operator's choices for a removal.
type Options struct {
	// Timeout bounds the drain; past it the drain of a node that is not
	// Ready is skipped, and of a Ready one fails (DefaultTimeout if 0).
	Timeout time.Duration
	// DeleteEmptyDirData evicts pods with emptyDir volumes, whose data is
	// lost (kubectl drain --delete-emptydir-data).
	DeleteEmptyDirData bool
	// EvictUnmanaged evicts pods no controller manages, which nothing
	// re-creates (kubectl drain --force).
	EvictUnmanaged bool
	// LeaveTimeout bounds the wait for a Ready node to say it stopped
	// (DefaultLeaveTimeout if 0).
	LeaveTimeout time.Duration
}

// Remover takes nodes out of a site's cluster.
type Remover struct {
	Site *site.Site
	Kube kubernetes.Interface
	// Etcd is only used for a node that is or was a master; nil when
	// etcd could not be reached (EtcdErr says why).
	Etcd    Etcd
	EtcdErr error
	Log     Logf
	Options
	// RetryBound bounds how long a step is tried again while it fails on
	// what passes by itself (DefaultRetryBound if 0).
	RetryBound time.Duration
	// Now and PollInterval are for tests (time.Now, 2 s if unset).
	Now          func() time.Time
	PollInterval time.Duration
}

// steps are the removal of n, in order: each one finds out what is left
// to do, does it, and says what it did through log; runStep tries it
// again while it fails on what passes by itself. revoke comes after
// wait-left, whose answer the node writes on its Node with its own
// credentials, and before delete-node, so that the kubelet of a node
// still running cannot register the Node again.
func (r *Remover) steps(n *node, log Logf) []steps.Step {
	step := func(name string, run func(ctx context.Context, n *node, log Logf) error) steps.Step {
		return steps.Step{Name: name, Run: func(ctx context.Context) error { return r.runStep(ctx, run, n, log) }}
	}
	return []steps.Step{
		step("check", r.check),
		step("cordon", r.cordon),
		step("drain", r.drain),
		step("etcd-member", r.removeMember),
		step("mark-removed", r.markRemoved),
		step("wait-left", r.waitLeft),
		step("revoke", r.revoke),
		step("delete-node", r.deleteNode),
	}
}

// Remove takes the node name out of the cluster, step by step; the
// error names the step at fault. A removal kiln refuses is a *etcdmember.Refusal,
// and an unknown name wraps ErrUnknownNode.
func (r *Remover) Remove(ctx context.Context, name string) error {
	var n *node
	err := r.retry(ctx, func(format string, args ...any) { r.Log("finding "+name+": "+format, args...) }, func() (err error) {
		n, err = r.resolve(ctx, name)
		return err
	})
	if err != nil {
		return err
	}
	var prefix string // the running step's "[i/n] name: "
	log := func(format string, args ...any) { r.Log(prefix+format, args...) }
	run := steps.Runner{
		Progress: func(e steps.Event) {
			if e.Kind == steps.Started {
				prefix = e.Label() + ": "
			}
		},
		Wrap: func(step string, err error) error { return fmt.Errorf("remove %s: %s: %w", name, step, err) },
	}
	if err := run.Run(ctx, r.steps(n, log)); err != nil {
		return err
	}
	r.Log("%s is out of the cluster; to bring it back, kiln pki renew --node %s, kiln gen, kiln node admit %s, then re-image it with a blank state disk (docs/operations.md#re-imaging-a-node)", name, name, name)
	return nil
}

// resolve finds the node in the site, the cluster and, for a master or
// a name the site does not know, etcd.
func (r *Remover) resolve(ctx context.Context, name string) (*node, error) {
	n := &node{name: name}
	for i, sn := range r.Site.Nodes {
		if sn.Name == name {
			n.site = &r.Site.Nodes[i]
		}
	}
	obj, err := r.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		n.obj = obj
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading Node %s: %w", name, err)
	}
	if r.needsEtcd(n) {
		if r.Etcd == nil {
			return nil, fmt.Errorf("%s is a master (or not in the site file), so its etcd member must be checked, and etcd cannot be reached: %w", name, r.EtcdErr)
		}
		list, err := r.Etcd.MemberList(ctx)
		if err != nil {
			return nil, err
		}
		n.members = etcdmember.MembersOf(list, name, n.peerURL())
	}
	if n.site == nil && n.obj == nil && len(n.members) == 0 {
		return nil, fmt.Errorf("%s: %w in the site file %s, the cluster's Nodes or etcd's members (a typo, or removed already)", name, ErrUnknownNode, r.Site.File)
	}
	return n, nil
}

// needsEtcd: a master's member is removed; a name the site does not
// know may be one's.
func (r *Remover) needsEtcd(n *node) bool { return n.site == nil || n.isMaster() }

// check refuses, before anything changes, a removal that would leave
// etcd without quorum or without a master.
func (r *Remover) check(ctx context.Context, n *node, log Logf) error {
	if !n.isMaster() {
		log("%s is a %s: no etcd member to remove", n.name, n.roleName())
		return nil
	}
	if len(n.members) == 0 {
		log("etcd has no member named %s or with peer URL %s (already removed)", n.name, n.peerURL())
		return nil
	}
	list, err := r.Etcd.MemberList(ctx)
	if err != nil {
		return err
	}
	for _, m := range n.members {
		if refusal := etcdmember.RemovalRefusal(ctx, r.Etcd, list, m); refusal != nil {
			return refusal
		}
	}
	log("etcd keeps its quorum without member(s) %s", describeAll(n.members))
	return nil
}

func describeAll(ms []etcdmember.Member) string {
	s := ""
	for i, m := range ms {
		if i > 0 {
			s += ", "
		}
		s += etcdmember.Describe(m)
	}
	return s
}

// cordon marks the Node unschedulable.
func (r *Remover) cordon(ctx context.Context, n *node, log Logf) error {
	switch {
	case n.obj == nil:
		log("no Node %s in the cluster: nothing to cordon", n.name)
		return nil
	case n.obj.Spec.Unschedulable:
		log("Node %s was already cordoned", n.name)
		return nil
	}
	patch := []byte(`{"spec":{"unschedulable":true}}`)
	obj, err := r.Kube.CoreV1().Nodes().Patch(ctx, n.name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		log("Node %s is gone: nothing to cordon", n.name)
		n.obj = nil
		return nil
	}
	if err != nil {
		return fmt.Errorf("cordoning Node %s: %w", n.name, err)
	}
	n.obj = obj
	log("cordoned Node %s", n.name)
	return nil
}

// removeMember removes the node's etcd members (by name or peer URL),
// checking the quorum again: the drain took time. A member already gone
// is done.
func (r *Remover) removeMember(ctx context.Context, n *node, log Logf) error {
	if !n.isMaster() {
		log("%s is a %s: no etcd member", n.name, n.roleName())
		return nil
	}
	list, err := r.Etcd.MemberList(ctx)
	if err != nil {
		return err
	}
	mine := etcdmember.MembersOf(list, n.name, n.peerURL())
	if len(mine) == 0 {
		log("etcd has no member named %s or with peer URL %s: already removed", n.name, n.peerURL())
		return nil
	}
	for _, m := range mine {
		if refusal := etcdmember.RemovalRefusal(ctx, r.Etcd, list, m); refusal != nil {
			return refusal
		}
		err := r.Etcd.Remove(ctx, m.ID)
		switch {
		case etcdmember.IsNotFound(err):
			log("etcd member %s: already removed", etcdmember.Describe(m))
		case err != nil:
			return fmt.Errorf("removing etcd member %s: %w", etcdmember.Describe(m), err)
		default:
			log("removed etcd member %s", etcdmember.Describe(m))
		}
		if list, err = r.Etcd.MemberList(ctx); err != nil {
			return err
		}
	}
	return nil
}

// revoke lists the node in the removed-nodes ConfigMap: the admission
// policy then refuses its credentials a certificate request and any
// write to a Node. A resumed removal keeps the first removal's time.
func (r *Remover) revoke(ctx context.Context, n *node, log Logf) error {
	e, wrote, err := removednodes.MarkRemoved(ctx, r.Kube, n.name, r.now())
	if err != nil {
		return err
	}
	where := removednodes.Namespace + "/" + removednodes.Name
	if !wrote {
		log("%s was already listed removed in ConfigMap %s (%s)", n.name, where, e)
		return nil
	}
	log("listed %s removed in ConfigMap %s (%s): its credentials may no longer renew or write a Node", n.name, where, e)
	return nil
}

// deleteNode deletes the Node, then the pods still bound to it, at once
// (grace 0), as the pod garbage collector would once it runs: a machine
// re-imaged under the same name must not find the old node's pods bound
// to it (its kubelet rejects them, and the DaemonSets count them as
// there). Nothing runs them: the node left, or is down.
func (r *Remover) deleteNode(ctx context.Context, n *node, log Logf) error {
	err := r.Kube.CoreV1().Nodes().Delete(ctx, n.name, metav1.DeleteOptions{})
	switch {
	case apierrors.IsNotFound(err):
		log("no Node %s in the cluster: already deleted", n.name)
	case err != nil:
		return fmt.Errorf("deleting Node %s: %w", n.name, err)
	default:
		log("deleted Node %s", n.name)
	}
	pods, err := r.podsOn(ctx, n.name)
	if err != nil {
		return err
	}
	var gone []string
	for _, p := range pods {
		err := r.Kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting pod %s, bound to the deleted Node %s: %w", podName(p), n.name, err)
		}
		gone = append(gone, podName(p))
	}
	if len(gone) > 0 {
		log("deleted the %d pod(s) still bound to %s: %s", len(gone), n.name, strings.Join(gone, ", "))
	}
	return nil
}
