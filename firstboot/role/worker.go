package role

import (
	"context"

	"github.com/kiln-project/kiln/node/etcdmember"
)

// workerPhases start the kubelet and wait until the node is Ready, as
// the kubelet's own credentials see it (a node may read its own Node);
// then the node asks for the labels its kubelet may not set, and the
// first time all that is done the join is stamped.
func (n *Node) workerPhases() []phase {
	u := n.units()
	return []phase{
		{Name: "start", Run: func(ctx context.Context) error {
			return u.files.startNode(ctx, u.env.params(etcdmember.Membership{}), nil)
		}},
		{Name: "node-ready", Run: u.kubelet.waitReadyAsKubelet},
		{Name: "publish-version", Run: u.kubelet.publishVersion},
		{Name: "request-labels", Once: true, Run: u.kubelet.requestLabels},
		{Name: "joined", Once: true, Run: func(context.Context) error { return nil }},
		{Name: "role-done", Run: u.kubelet.publishRoleDone},
	}
}
