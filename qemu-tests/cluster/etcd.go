package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// EtcdMember is one member as the test checks it.
type EtcdMember struct {
	Name      string
	IsLearner bool
}

// EtcdMembers lists the members through the etcd at endpoint, with the
// apiserver's etcd client certificate from a master's config cfg; every
// connection is made by dial (a netns.Net's DialContext).
func EtcdMembers(ctx context.Context, cfg []byte, endpoint string, dial Dialer) ([]EtcdMember, error) {
	c, err := etcdClient(cfg, endpoint, dial)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, etcdCallBound)
	defer cancel()
	r, err := c.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcd member list at %s: %w", endpoint, err)
	}
	var out []EtcdMember
	for _, m := range r.Members {
		out = append(out, EtcdMember{Name: m.Name, IsLearner: m.IsLearner})
	}
	return out, nil
}

// etcdCallBound is how long one of the test's etcd calls may take,
// connection included: a new connection to a starved member's TLS
// listener took longer than 15 s after a whole-cluster cut.
const etcdCallBound = 30 * time.Second

// Dialer makes the test's connections (a netns.Net's DialContext, or a
// plain net.Dialer's for a host port forward).
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// etcdClient connects to the etcd at endpoint with the apiserver's etcd
// client certificate from a master's config cfg.
func etcdClient(cfg []byte, endpoint string, dial Dialer) (*clientv3.Client, error) {
	tlsCfg, err := etcdTLS(cfg)
	if err != nil {
		return nil, err
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints: []string{endpoint}, TLS: tlsCfg, DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dial(ctx, "tcp", addr)
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %s: %w", endpoint, err)
	}
	return c, nil
}

func etcdTLS(cfg []byte) (*tls.Config, error) {
	crt, err := File(cfg, "/etc/kiln/pki/apiserver-etcd-client.crt")
	if err != nil {
		return nil, err
	}
	key, err := File(cfg, "/etc/kiln/pki/apiserver-etcd-client.key")
	if err != nil {
		return nil, err
	}
	ca, err := File(cfg, "/etc/kiln/pki/etcd/ca.crt")
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, fmt.Errorf("the etcd client pair: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// EtcdValue reads key's raw value through the etcd at endpoint, as the
// apiserver stored it, with the apiserver's etcd client certificate from
// a master's config cfg; dial makes the connection.
func EtcdValue(ctx context.Context, cfg []byte, endpoint, key string, dial Dialer) ([]byte, error) {
	c, err := etcdClient(cfg, endpoint, dial)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, etcdCallBound)
	defer cancel()
	r, err := c.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("etcd get %s at %s: %w", key, endpoint, err)
	}
	if len(r.Kvs) == 0 {
		return nil, nil
	}
	return r.Kvs[0].Value, nil
}
