// Package upgrade is kiln upgrade, the rolling upgrade of a site's
// cluster onto a new image: the target build read from its manifest,
// the version skew rules (Kubernetes one minor at a time, masters
// before kubelets; etcd one minor at a time), and the plan: one step
// per node, the masters in site order one at a time, then the workers,
// each with its pre-checks (the node Ready, etcd healthy, and for a
// master, etcd keeping quorum while it is down) and skipped when the
// node already runs the target image, so a second run resumes where
// the first stopped. A plan is what --dry-run prints. The Roller runs a
// plan: each node re-checked, a worker cordoned and drained
// (nodeops.Drainer), the node asked through its Node to stage the build
// and reboot (contract/upgradeask), then the bounded waits for its
// answer, its new boot and node/healthgate's gate; it stops at the first
// node that does not pass. The node side that answers the ask is not
// built yet, so kiln upgrade does not run the Roller (Start).
package upgrade

import (
	"context"

	"github.com/kiln-project/kiln/node/etcdmember"
)

// Etcd is what the plan asks of the cluster's etcd (etcdmember.Client).
type Etcd interface {
	// MemberList is the cluster's member list.
	MemberList(ctx context.Context) ([]etcdmember.Member, error)
	// Healthy is nil when the member at clientURL answers a status call.
	Healthy(ctx context.Context, clientURL string) error
	// Version is the etcd release the member at clientURL runs.
	Version(ctx context.Context, clientURL string) (string, error)
}
