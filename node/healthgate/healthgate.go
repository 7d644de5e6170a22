// Package healthgate owns the one health gate a node passes after it
// boots (a new image, a reboot): the node agent is to ask it about its
// own boot, and kiln upgrade's rollout about a node it rebooted, before
// the rollout goes on. A node passes when its Node is Ready with a heartbeat of the
// boot asked about and its role is done on that boot; a master also
// when its etcd member votes, every voting member answers, and its own
// apiserver is ready. The verdict names every condition not met.
package healthgate

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// Etcd is what the gate asks of the cluster's etcd (etcdmember.Client).
type Etcd interface {
	// MemberList is the cluster's member list.
	MemberList(ctx context.Context) ([]etcdmember.Member, error)
	// Healthy is nil when the member at clientURL answers a status call.
	Healthy(ctx context.Context, clientURL string) error
}

// APIServer answers whether a master's own apiserver is ready (its
// /readyz): the agent asks its local one, the rollout that master's
// address.
type APIServer interface {
	Ready(ctx context.Context, node string) error
}

// APIServerFunc is an APIServer of one function.
type APIServerFunc func(ctx context.Context, node string) error

// Ready calls f.
func (f APIServerFunc) Ready(ctx context.Context, node string) error { return f(ctx, node) }

// Boot is the boot the Node must report (status.nodeInfo.bootID): this
// one (ID, the agent's own /proc/sys/kernel/random/boot_id), or any
// other than the one recorded before a reboot (Before, the rollout's).
type Boot struct {
	ID     string
	Before string
}

// ThisBoot is the boot whose ID is id.
func ThisBoot(id string) Boot { return Boot{ID: id} }

// After is any boot but the one whose ID before was recorded.
func After(before string) Boot { return Boot{Before: before} }

// check is nil when the Node's boot ID got is the boot asked about.
func (b Boot) check(got string) error {
	switch {
	case got == "":
		return fmt.Errorf("the Node reports no boot ID yet")
	case b.ID != "" && got != b.ID:
		return fmt.Errorf("the Node reports boot %s, not this boot %s (its kubelet has not reported since)", got, b.ID)
	case b.ID == "" && got == b.Before:
		return fmt.Errorf("the Node still reports boot %s, the one before the reboot", got)
	}
	return nil
}

// doneOn reports whether a role done on boot done is done on the boot
// asked about, the Node reporting boot reported.
func (b Boot) doneOn(done, reported string) bool {
	if b.ID != "" {
		return done == b.ID
	}
	return done != b.Before && done == reported
}

// String names the boot asked about.
func (b Boot) String() string {
	if b.ID != "" {
		return "this boot " + b.ID
	}
	return "a boot after " + b.Before
}

// RoleDone says on which boot the node's role last finished: the agent
// knows it from its status (Known), the rollout reads what the node
// publishes on its Node (Published).
type RoleDone interface {
	DoneBoot(n *corev1.Node) string
}

// Known is the boot ID the agent's status says its role finished on
// ("" while it has not).
type Known string

// DoneBoot is k.
func (k Known) DoneBoot(*corev1.Node) string { return string(k) }

// Published reads the boot ID from the Node's annotation
// nodefile.RoleDoneAnnotation, which the agent writes once its role is
// done.
type Published struct{}

// DoneBoot is the annotation's value.
func (Published) DoneBoot(n *corev1.Node) string { return n.Annotations[nodefile.RoleDoneAnnotation] }

// Target is the node the gate is asked about.
type Target struct {
	Node string
	Role string // nodefile.RoleGenesis, RoleMaster or RoleWorker
	Boot Boot
	// Since: the Ready heartbeat must be at or after it (the boot's
	// start, or when the rollout asked for the reboot); zero: any.
	Since    time.Time
	RoleDone RoleDone
}

func (t Target) master() bool { return t.Role == nodefile.RoleGenesis || t.Role == nodefile.RoleMaster }

// Gate reaches what it checks: the apiserver (any master's), etcd, and
// for a master its own apiserver.
type Gate struct {
	Kube      kubernetes.Interface
	Etcd      Etcd
	APIServer APIServer
}

// Condition is one unmet condition of the gate: its name ("boot",
// "ready", "role", "etcd member", "etcd health", "apiserver") and why.
type Condition struct {
	Name, Why string
}

// Unmet is the gate's refusal: every condition the node does not meet.
type Unmet struct {
	Node       string
	Conditions []Condition
}

func (u *Unmet) Error() string {
	return fmt.Sprintf("node %s has not passed the health gate: %s", u.Node, u.Reasons())
}

// Reasons are the unmet conditions, "name: why" each, without the node's
// name: what a node itself records as why its trying boot failed.
func (u *Unmet) Reasons() string {
	parts := make([]string, len(u.Conditions))
	for i, c := range u.Conditions {
		parts[i] = c.Name + ": " + c.Why
	}
	return strings.Join(parts, "; ")
}

// Names are the unmet conditions' names.
func (u *Unmet) Names() []string {
	out := make([]string, len(u.Conditions))
	for i, c := range u.Conditions {
		out[i] = c.Name
	}
	return out
}

// Check is nil when the node passes the gate, else an *Unmet naming
// every condition it does not meet.
func (g Gate) Check(ctx context.Context, t Target) error {
	u := &Unmet{Node: t.Node}
	n := g.node(ctx, t, u)
	if t.master() {
		g.etcd(ctx, t, n, u)
		if err := g.APIServer.Ready(ctx, t.Node); err != nil {
			u.add("apiserver", "%s's apiserver is not ready: %v", t.Node, err)
		}
	}
	if len(u.Conditions) > 0 {
		return u
	}
	return nil
}

func (u *Unmet) add(name, format string, args ...any) {
	u.Conditions = append(u.Conditions, Condition{Name: name, Why: fmt.Sprintf(format, args...)})
}

// node checks the Node: of the boot asked about, Ready on it, its role
// done on it. It returns the Node (nil when it cannot be read).
func (g Gate) node(ctx context.Context, t Target, u *Unmet) *corev1.Node {
	n, err := g.Kube.CoreV1().Nodes().Get(ctx, t.Node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		u.add("ready", "no Node %s in the cluster", t.Node)
		return nil
	case err != nil:
		u.add("ready", "reading Node %s: %v", t.Node, err)
		return nil
	}
	boot := n.Status.NodeInfo.BootID
	bootErr := t.Boot.check(boot)
	if bootErr != nil {
		u.add("boot", "%v", bootErr)
	}
	if err := clustercheck.NodeIsReady(n, t.Since); err != nil {
		u.add("ready", "%v", err)
	} else if bootErr != nil {
		u.add("ready", "Ready, but reported by the kubelet of boot %s", boot)
	}
	done := ""
	if t.RoleDone != nil {
		done = t.RoleDone.DoneBoot(n)
	}
	switch {
	case done == "":
		u.add("role", "the %s role is not done on any boot", t.Role)
	case !t.Boot.doneOn(done, boot):
		u.add("role", "the %s role was last done on boot %s, not on %s", t.Role, done, t.Boot)
	}
	return n
}

// etcd checks a master's member votes and every voting member answers.
func (g Gate) etcd(ctx context.Context, t Target, n *corev1.Node, u *Unmet) {
	list, err := g.Etcd.MemberList(ctx)
	if err != nil {
		u.add("etcd member", "etcd's member list: %v", err)
		return
	}
	peer := ""
	if a := internalIP(n); a != "" {
		peer = etcdmember.PeerURL(a)
	}
	switch mine := etcdmember.MembersOf(list, t.Node, peer); {
	case len(mine) == 0:
		u.add("etcd member", "%s has no etcd member", t.Node)
	case len(mine) > 1:
		var ds []string
		for _, m := range mine {
			ds = append(ds, etcdmember.Describe(m))
		}
		u.add("etcd member", "%s has %d etcd members (%s): one is stale", t.Node, len(mine), strings.Join(ds, "; "))
	case mine[0].IsLearner:
		u.add("etcd member", "member %s is a learner, not yet a voting member", etcdmember.Describe(mine[0]))
	}
	if down := etcdmember.DownVoters(ctx, g.Etcd, list); len(down) > 0 {
		u.add("etcd health", "voting members not answering: %s", strings.Join(down, ", "))
	}
}

func internalIP(n *corev1.Node) string {
	if n == nil {
		return ""
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}
