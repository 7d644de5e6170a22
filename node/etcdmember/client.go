package etcdmember

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// Member is one etcd member as kiln sees it.
type Member struct {
	ID         uint64
	Name       string // empty until the member has started
	PeerURLs   []string
	ClientURLs []string
	IsLearner  bool
}

// Client reads and changes a cluster's member list through etcd's
// client, talking to the given endpoints (voting members: a learner
// answers "rpc not supported for learner"). Every call is bounded.
type Client struct{ c *clientv3.Client }

// Bounds of one call: a member list or change, and a status probe.
const (
	callBound   = 15 * time.Second
	statusBound = 5 * time.Second
)

// reconnect is how often the client tries an endpoint again while it
// does not answer. gRPC's default backs off to 120 s; kiln dials members
// that are still starting (after a power cut, before etcd listens), and
// with that default the first attempt after etcd serves came 15-20 s
// late, on the path to every master's apiserver. Attempts at most 2 s
// apart cost a refused TCP connect each.
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 500 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
	MinConnectTimeout: 10 * time.Second,
}

// Dial makes a client for endpoints (client URLs) with cfg; it connects
// lazily, so an endpoint that does not answer shows in the first call.
func Dial(endpoints []string, cfg *tls.Config) (*Client, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: cfg, DialTimeout: 10 * time.Second,
		DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 10 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(reconnect)}})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %v: %w", endpoints, err)
	}
	return &Client{c}, nil
}

// ClientTLS is the client side of an etcd connection: the client pair,
// trusting only the etcd CA, all PEM.
func ClientTLS(certPEM, keyPEM, caPEM []byte) (*tls.Config, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the etcd client certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the etcd CA: no certificate")
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// ClientFiles are the client pair and CA a master talks to etcd with
// (the apiserver's etcd client certificate), relative to its PKI
// directory.
var ClientFiles = [3]string{"apiserver-etcd-client.crt", "apiserver-etcd-client.key", "etcd/ca.crt"}

// ReadClientTLS is ClientTLS from a master's PKI directory.
func ReadClientTLS(pkiDir string) (*tls.Config, error) {
	var pem [3][]byte
	for i, f := range ClientFiles {
		var err error
		if pem[i], err = os.ReadFile(filepath.Join(pkiDir, f)); err != nil {
			return nil, fmt.Errorf("the etcd client TLS: %w", err)
		}
	}
	return ClientTLS(pem[0], pem[1], pem[2])
}

func call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, callBound)
}

// MemberList is the cluster's member list.
func (e *Client) MemberList(ctx context.Context) ([]Member, error) {
	ctx, cancel := call(ctx)
	defer cancel()
	r, err := e.c.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcd member list at %s: %w", strings.Join(e.c.Endpoints(), ","), err)
	}
	return members(r.Members), nil
}

// AddLearner adds a learner and returns its ID and the member list the
// add returned (the new learner included).
func (e *Client) AddLearner(ctx context.Context, peerURL string) (uint64, []Member, error) {
	ctx, cancel := call(ctx)
	defer cancel()
	r, err := e.c.MemberAddAsLearner(ctx, []string{peerURL})
	if err != nil {
		return 0, nil, fmt.Errorf("etcd member add --learner %s: %w", peerURL, err)
	}
	return r.Member.ID, members(r.Members), nil
}

// Promote makes a learner a voting member.
func (e *Client) Promote(ctx context.Context, id uint64) error {
	ctx, cancel := call(ctx)
	defer cancel()
	_, err := e.c.MemberPromote(ctx, id)
	return err
}

// Remove removes the member id; IsNotFound tells a member already gone.
func (e *Client) Remove(ctx context.Context, id uint64) error {
	ctx, cancel := call(ctx)
	defer cancel()
	_, err := e.c.MemberRemove(ctx, id)
	return err
}

// Healthy is nil when the member at clientURL answers a status call
// within 5 s.
func (e *Client) Healthy(ctx context.Context, clientURL string) error {
	ctx, cancel := context.WithTimeout(ctx, statusBound)
	defer cancel()
	_, err := e.c.Status(ctx, clientURL)
	return err
}

// Version is the etcd release (such as 3.6.5) the member at clientURL
// runs, from a status call (5 s).
func (e *Client) Version(ctx context.Context, clientURL string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, statusBound)
	defer cancel()
	s, err := e.c.Status(ctx, clientURL)
	if err != nil {
		return "", err
	}
	return s.Version, nil
}

// Leads reports whether the member at clientURL leads its cluster, from
// a status call (5 s); a member that knows no leader is an error.
func (e *Client) Leads(ctx context.Context, clientURL string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, statusBound)
	defer cancel()
	s, err := e.c.Status(ctx, clientURL)
	if err != nil {
		return false, err
	}
	if s.Leader == 0 {
		return false, fmt.Errorf("etcd member at %s knows no leader", clientURL)
	}
	return s.Leader == s.Header.MemberId, nil
}

// Quorum is nil when a linearizable read through the client's endpoints
// succeeds within 15 s: the cluster has a leader that a majority of its
// voting members follow. Status (Healthy) answers without quorum.
func (e *Client) Quorum(ctx context.Context) error {
	ctx, cancel := call(ctx)
	defer cancel()
	_, err := e.c.Get(ctx, "kiln/quorum-probe", clientv3.WithCountOnly())
	return err
}

// Maintenance is the client's maintenance API (snapshots, status), whose
// calls are the caller's to bound: a snapshot streams for as long as the
// database takes.
func (e *Client) Maintenance() clientv3.Maintenance { return e.c.Maintenance }

// Close ends the client's connections.
func (e *Client) Close() error { return e.c.Close() }

// IsNotFound reports whether err is etcd's answer for a member ID that
// is not (or no longer) in the member list.
func IsNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrMemberNotFound) || (err != nil && strings.Contains(err.Error(), "member not found"))
}

func members(in []*pb.Member) []Member {
	out := make([]Member, 0, len(in))
	for _, m := range in {
		out = append(out, Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner})
	}
	return out
}
