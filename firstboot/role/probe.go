package role

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// presence is what a probe of another master's etcd port proves.
type presence int

const (
	// absent: nothing listens there (connection refused, or the address
	// does not answer ARP): no etcd member runs at that master.
	absent presence = iota
	// present: a TLS server with a certificate from the site's etcd CA
	// accepted this node's client certificate: a member runs there.
	present
	// unknown: a timeout, a certificate from another CA, a rejected
	// client certificate: not proof of anything, so a genesis node must
	// not bootstrap on it.
	unknown
)

// errCertRejected marks a master's etcd refusing this node's client
// certificate: the node's PKI is not the cluster's.
var errCertRejected = errors.New("the cluster rejects this node's certificate")

// errForeignCA marks a master whose etcd serves a certificate this
// node's etcd CA did not sign: the node and that master belong to
// different PKIs (another kiln gen run), which no wait changes.
var errForeignCA = errors.New("its certificate is not from this site's etcd CA")

// foreignPKI tells whether err says this node and the cluster it reached
// do not share a PKI, in either direction.
func foreignPKI(err error) bool {
	return errors.Is(err, errCertRejected) || errors.Is(err, errForeignCA)
}

// probeEtcd tells whether an etcd member answers at addr. It fails
// closed: only a refused connection or an unreachable host count as
// absent.
func probeEtcd(ctx context.Context, addr string, cfg *tls.Config) (presence, error) {
	ctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
			return absent, err
		}
		return unknown, err
	}
	defer raw.Close()
	cfg = cfg.Clone()
	cfg.ServerName, _, _ = net.SplitHostPort(addr)
	conn := tls.Client(raw, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		return unknown, classifyTLS(err)
	}
	// Under TLS 1.3 the server checks the client's certificate after the
	// client's handshake ends: its alert, if any, is the first read.
	// etcd's gRPC server speaks first (its HTTP/2 settings) when it
	// accepted us; a read timeout also means no alert came.
	conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil && !isTimeout(err) {
		return unknown, classifyTLS(err)
	}
	return present, nil
}

func classifyTLS(err error) error {
	var alert tls.AlertError
	var unknownCA x509.UnknownAuthorityError
	var certErr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &alert):
		return fmt.Errorf("%w: %w", errCertRejected, err)
	case errors.As(err, &unknownCA), errors.As(err, &certErr):
		return fmt.Errorf("%w: %w", errForeignCA, err)
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// etcdClientTLS is the client side of every etcd connection a master
// makes: its apiserver-etcd-client pair, trusting only the etcd CA.
func (n *Node) etcdClientTLS() (*tls.Config, error) {
	return etcdmember.ReadClientTLS(n.path(nodefile.PKIDir))
}

// otherMasters are the site's masters other than this node.
func (n *Node) otherMasters() []nodefile.Member {
	var out []nodefile.Member
	for _, m := range n.file.Masters {
		if m.Name != n.file.Name {
			out = append(out, m)
		}
	}
	return out
}

// survey probes every other master's etcd: which answer, and the first
// reason a master could not be ruled out, preferring one that says the
// PKIs differ.
func (n *Node) survey(ctx context.Context, cfg *tls.Config) (answering []nodefile.Member, doubt error) {
	for _, m := range n.otherMasters() {
		addr := net.JoinHostPort(m.Address, fmt.Sprint(n.etcdPort()))
		switch p, err := probeEtcd(ctx, addr, cfg); p {
		case present:
			answering = append(answering, m)
		case unknown:
			if doubt == nil || (foreignPKI(err) && !foreignPKI(doubt)) {
				doubt = fmt.Errorf("master %s (%s): %w", m.Name, addr, err)
			}
		}
	}
	return answering, doubt
}

func (n *Node) etcdPort() int {
	if n.EtcdPort == 0 {
		return 2379
	}
	return n.EtcdPort
}
