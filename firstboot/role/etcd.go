package role

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"github.com/kiln-project/kiln/node/etcdmember"
)

// member is an etcd member as the join sees it.
type member = etcdmember.Member

// etcdCluster is what a joining master needs of its cluster's etcd
// (etcdmember.Client, talking only to the voting members).
type etcdCluster interface {
	MemberList(ctx context.Context) ([]member, error)
	// AddLearner adds a learner and returns its ID and the member list
	// the add returned (the new learner included).
	AddLearner(ctx context.Context, peerURL string) (uint64, []member, error)
	Promote(ctx context.Context, id uint64) error
	Remove(ctx context.Context, id uint64) error
	// Healthy is nil when the member at clientURL answers a status call.
	Healthy(ctx context.Context, clientURL string) error
	Close() error
}

// connectCluster dials the etcd, at port, of the other masters that
// answer.
func connectCluster(answering []string, port int, cfg *tls.Config) (etcdCluster, error) {
	var eps []string
	for _, a := range answering {
		eps = append(eps, "https://"+net.JoinHostPort(a, fmt.Sprint(port)))
	}
	return etcdmember.Dial(eps, cfg)
}

// membershipAfterAdd is the record of a learner just added: every
// member the add returned, named (the new one by this node's name, as
// etcd does not know it before it starts).
func membershipAfterAdd(name, peerURL string, id uint64, all []member) etcdmember.Membership {
	rec := etcdmember.Membership{Name: name, PeerURL: peerURL, ID: fmt.Sprintf("%x", id), State: etcdmember.StateExisting}
	for _, m := range all {
		mName := m.Name
		if m.ID == id {
			mName = name
		}
		for _, u := range m.PeerURLs {
			rec.Peers = append(rec.Peers, etcdmember.Peer{Name: mName, PeerURL: u})
		}
	}
	return rec
}
