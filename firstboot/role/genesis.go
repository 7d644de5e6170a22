package role

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/kiln-project/kiln/nodefile"
)

const genesisStamp = "genesis.done"

// genesis bootstraps the cluster once, and on every later boot lets the
// kubelet bring the control plane back from the persisted static pods.
// It reports whether the control plane was restored rather than made.
func (n *Node) genesis(ctx context.Context) (bool, error) {
	since := time.Now()
	restored := n.stamped(genesisStamp)
	if !restored {
		if err := n.refuseIfClusterExists(ctx); err != nil {
			return false, err
		}
	}
	if err := n.startNode(ctx, n.params()); err != nil {
		return restored, err
	}
	c, err := n.client()
	if err != nil {
		return restored, err
	}
	if err := c.waitHealthy(ctx, n.Wait); err != nil {
		return restored, err
	}
	if restored {
		n.Log("control plane restored from the persisted manifests; waiting for node %s to be Ready", n.file.Name)
		return true, c.waitNodeReady(ctx, n.file.Name, since, n.Wait)
	}
	if err := c.applyAddOns(ctx, n.params()); err != nil {
		return false, err
	}
	if err := c.labelNode(ctx, n.file.Name, n.Wait); err != nil {
		return false, err
	}
	if err := c.waitNodeReady(ctx, n.file.Name, since, n.Wait); err != nil {
		return false, err
	}
	if err := c.validate(ctx, n.cat.Manifests().Kiln, n.file.Cluster.Domain, n.Wait); err != nil {
		return false, err
	}
	return false, n.stamp(genesisStamp)
}

// refuseIfClusterExists probes etcd at every other master of the site: if
// one answers, a cluster exists, and a second genesis would split it.
func (n *Node) refuseIfClusterExists(ctx context.Context) error {
	tlsCfg, err := n.etcdClientTLS()
	if err != nil {
		return err
	}
	for _, m := range n.file.Masters {
		if m.Name == n.file.Name {
			continue
		}
		port := n.EtcdPort
		if port == 0 {
			port = 2379
		}
		addr := net.JoinHostPort(m.Address, strconv.Itoa(port))
		if etcdAnswers(ctx, addr, tlsCfg) {
			return fmt.Errorf("%w: etcd already answers at master %s (%s): this site has a cluster. Boot this machine as a master to join it, or re-image the site's masters to start over", errRefused, m.Name, addr)
		}
		n.Log("no etcd at master %s (%s): bootstrapping is safe", m.Name, addr)
	}
	return nil
}

// etcdAnswers is true when a TLS server completes a handshake on the
// address: an etcd member that is up, whatever its health.
func etcdAnswers(ctx context.Context, addr string, cfg *tls.Config) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d := tls.Dialer{Config: cfg, NetDialer: &net.Dialer{}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

func (n *Node) etcdClientTLS() (*tls.Config, error) {
	pki := func(f string) string { return n.path(nodefile.PKIDir + "/" + f) }
	pair, err := tls.LoadX509KeyPair(pki("apiserver-etcd-client.crt"), pki("apiserver-etcd-client.key"))
	if err != nil {
		return nil, fmt.Errorf("the etcd client certificate: %w", err)
	}
	ca, err := os.ReadFile(pki("etcd/ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("the etcd CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s: no certificate", pki("etcd/ca.crt"))
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
