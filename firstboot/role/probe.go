package role

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/retry"
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
	// waiting: that master's agent answered instead of etcd (beacon.go):
	// a master of this site waiting to join, with no etcd member.
	waiting
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

// probeBound bounds one probe of a master's etcd port.
const probeBound = 8 * time.Second

// probeEtcd tells whether an etcd member answers at addr within bound.
// It fails closed: only a refused connection, an unreachable host or a
// master's waiting banner count as no member.
func probeEtcd(ctx context.Context, addr string, cfg *tls.Config, bound time.Duration) (presence, error) {
	ctx, cancel := context.WithTimeout(ctx, bound)
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
	// etcd's gRPC server speaks first (its HTTP/2 settings) or waits for
	// the client when it accepted us; a read timeout also means no alert
	// came. A master waiting to join writes its banner.
	conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	b := make([]byte, len(WaitingBanner))
	for got := 0; ; {
		k, err := conn.Read(b[got:])
		got += k
		switch {
		case got == len(b) && string(b) == WaitingBanner:
			return waiting, nil
		case !strings.HasPrefix(WaitingBanner, string(b[:got])):
			return present, nil // not the banner: etcd speaking first
		case err != nil && got == 0 && !isTimeout(err):
			return unknown, classifyTLS(err)
		case err != nil:
			return present, nil
		}
	}
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

// doubt is a master that a survey could not rule out, and why.
type doubt struct {
	master nodefile.Member
	addr   string
	err    error
}

func (d doubt) Error() string { return fmt.Sprintf("master %s (%s): %v", d.master.Name, d.addr, d.err) }
func (d doubt) Unwrap() error { return d.err }

// surveyed is what a survey of the other masters' etcd ports found.
type surveyed struct {
	answering []nodefile.Member // an etcd member runs there
	waiting   []nodefile.Member // a master waiting to join, no member
	doubts    []doubt           // neither proven
}

// foreign is the first doubt that proves another PKI, if any: no wait
// changes it.
func (s surveyed) foreign() error {
	for _, d := range s.doubts {
		if foreignPKI(d.err) {
			return d
		}
	}
	return nil
}

// doubt is the survey's reason to go on waiting: the first doubt,
// preferring one that proves another PKI; nil when there is none.
func (s surveyed) doubt() error {
	if err := s.foreign(); err != nil {
		return err
	}
	if len(s.doubts) > 0 {
		return s.doubts[0]
	}
	return nil
}

// waitingOn names the masters not ruled out yet, with each reason.
func (s surveyed) waitingOn() string {
	var parts []string
	for _, d := range s.doubts {
		parts = append(parts, fmt.Sprintf("%s (%s): %s", d.master.Name, d.addr, retry.OneLine(d.err)))
	}
	return strings.Join(parts, "; ")
}

// surveyor owns the probes of the site's other masters' etcd ports:
// a genesis node's proof that no cluster exists (requireNoCluster), a
// joining master's wait for one (waitForCluster).
type surveyor struct {
	env  nodeEnv
	port int // the masters' etcd port
	// bound bounds one probe; 0 means probeBound.
	bound time.Duration
}

// survey probes every other master's etcd port.
func (sv surveyor) survey(ctx context.Context, cfg *tls.Config) surveyed {
	var s surveyed
	bound := sv.bound
	if bound == 0 {
		bound = probeBound
	}
	for _, m := range sv.env.otherMasters() {
		addr := net.JoinHostPort(m.Address, fmt.Sprint(sv.port))
		switch p, err := probeEtcd(ctx, addr, cfg, bound); p {
		case present:
			s.answering = append(s.answering, m)
		case waiting:
			s.waiting = append(s.waiting, m)
		case unknown:
			s.doubts = append(s.doubts, doubt{m, addr, err})
		}
	}
	return s
}
