package role

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kiln-project/kiln/etcdmember"
)

// member is an etcd member as the join sees it.
type member struct {
	ID         uint64
	Name       string // empty until the member has started
	PeerURLs   []string
	ClientURLs []string
	IsLearner  bool
}

// etcdCluster is what a joining master needs of its cluster's etcd.
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

// etcdClient is etcdCluster on etcd's client, talking only to the given
// (voting) members: a learner answers "rpc not supported for learner".
type etcdClient struct{ c *clientv3.Client }

func dialEtcd(endpoints []string, cfg *tls.Config) (*etcdClient, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: cfg, DialTimeout: 10 * time.Second,
		DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %v: %w", endpoints, err)
	}
	return &etcdClient{c}, nil
}

func call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 15*time.Second)
}

func (e *etcdClient) MemberList(ctx context.Context) ([]member, error) {
	ctx, cancel := call(ctx)
	defer cancel()
	r, err := e.c.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcd member list: %w", err)
	}
	return members(r.Members), nil
}

func (e *etcdClient) AddLearner(ctx context.Context, peerURL string) (uint64, []member, error) {
	ctx, cancel := call(ctx)
	defer cancel()
	r, err := e.c.MemberAddAsLearner(ctx, []string{peerURL})
	if err != nil {
		return 0, nil, fmt.Errorf("etcd member add --learner %s: %w", peerURL, err)
	}
	return r.Member.ID, members(r.Members), nil
}

func (e *etcdClient) Promote(ctx context.Context, id uint64) error {
	ctx, cancel := call(ctx)
	defer cancel()
	_, err := e.c.MemberPromote(ctx, id)
	return err
}

func (e *etcdClient) Remove(ctx context.Context, id uint64) error {
	ctx, cancel := call(ctx)
	defer cancel()
	_, err := e.c.MemberRemove(ctx, id)
	return err
}

func (e *etcdClient) Healthy(ctx context.Context, clientURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := e.c.Status(ctx, clientURL)
	return err
}

func (e *etcdClient) Close() error { return e.c.Close() }

func members(in []*pb.Member) []member {
	out := make([]member, 0, len(in))
	for _, m := range in {
		out = append(out, member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner})
	}
	return out
}

// connectCluster dials the etcd of the other masters that answer.
func (n *Node) connectCluster(answering []string, cfg *tls.Config) (etcdCluster, error) {
	var eps []string
	for _, a := range answering {
		eps = append(eps, "https://"+net.JoinHostPort(a, fmt.Sprint(n.etcdPort())))
	}
	return dialEtcd(eps, cfg)
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
