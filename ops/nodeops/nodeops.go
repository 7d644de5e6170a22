// Package nodeops is what the operator runs against a site's cluster
// from their own machine (or any master), with the site file and the
// PKI kiln gen keeps: `kiln node list` (every node with its role,
// address, readiness, etcd membership, version and certificate expiry)
// `kiln node remove` (cordon, drain, leave etcd, list the node as
// removed, delete the Node: a list of named, idempotent steps, so a
// second run finishes what an interrupted one started) and `kiln node
// admit` (let a removed node back in with its new kubelet certificate). The commands reach the apiserver and etcd
// of each master in turn (Connect); the logic sees them through a
// client-go interface and the small Etcd interface, so tests use fakes.
package nodeops

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// Etcd is what the node commands need of the cluster's etcd
// (etcdmember.Client).
type Etcd interface {
	// MemberList is the cluster's member list.
	MemberList(ctx context.Context) ([]etcdmember.Member, error)
	// Remove removes a member; etcdmember.IsNotFound tells one already gone.
	Remove(ctx context.Context, id uint64) error
	// Healthy is nil when the member at clientURL answers a status call.
	Healthy(ctx context.Context, clientURL string) error
}

// Logf prints a progress line; the commands print every step's doing.
type Logf = retry.Logf

// node is one node as the site, the cluster's Node and etcd know it.
type node struct {
	name    string
	site    *site.Node   // nil: not in the site file
	obj     *corev1.Node // nil: no Node in the cluster
	members []etcdmember.Member
}

// role is the site's role; for a node the site does not name, master
// when its Node has the master label, else unknown (""). Only a master's
// agent or an administrator can set the master label: NodeRestriction
// keeps a kubelet from setting it, and the masters' anchor never applies
// it. The Node's kiln.dev/role says nothing here: a kubelet sets it on
// itself, with any value.
func (n node) role() string {
	if n.site != nil {
		return n.site.Role
	}
	if n.obj != nil {
		if _, ok := n.obj.Labels[manifests.MasterLabel]; ok {
			return site.RoleMaster
		}
	}
	return ""
}

// roleName is the role, or what the node is when neither the site nor
// the master label says: for messages.
func (n node) roleName() string {
	if r := n.role(); r != "" {
		return r
	}
	return "node the site does not name"
}

// isMaster reports whether the node runs (or ran) the control plane:
// the site or its Node says so, or etcd has a member for it.
func (n node) isMaster() bool {
	r := n.role()
	return r == site.RoleGenesis || r == site.RoleMaster || len(n.members) > 0
}

// address is the site's static address, else the Node's InternalIP.
func (n node) address() string {
	if n.site != nil && n.site.IP().IsValid() {
		return n.site.IP().String()
	}
	if n.obj != nil {
		for _, a := range n.obj.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				return a.Address
			}
		}
	}
	return ""
}

// peerURL is the etcd peer URL a member of this node has, "" without an
// address.
func (n node) peerURL() string {
	if a := n.address(); a != "" {
		return etcdmember.PeerURL(a)
	}
	return ""
}

// readyOf is the Node's Ready condition: "Ready", "NotReady", "Unknown"
// (the node controller lost its kubelet), or "no Node".
func readyOf(n *corev1.Node) string {
	if n == nil {
		return "no Node"
	}
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		switch c.Status {
		case corev1.ConditionTrue:
			return "Ready"
		case corev1.ConditionFalse:
			return "NotReady"
		}
		return "Unknown"
	}
	return "Unknown"
}
