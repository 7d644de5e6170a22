package role

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// WaitingBanner is what a master waiting to join answers on its etcd
// client port while it has no etcd member: a genesis node's survey reads
// it as proof that no member runs there. Only a TLS peer with a client
// certificate from the site's etcd CA gets it, and the server's own
// certificate is the master's etcd serving certificate, so neither side
// can be a stranger.
const WaitingBanner = "kiln: master waiting to join, no etcd member yet\n"

// beacon answers probes of this master's etcd port with WaitingBanner
// until it is closed, before the master adds its etcd member.
type beacon struct {
	ln   net.Listener
	cfg  *tls.Config
	wg   sync.WaitGroup
	once sync.Once
}

// beaconTLS is the server side of the beacon: this master's etcd serving
// pair, asking every client for a certificate from the etcd CA.
func beaconTLS(pkiDir string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, "etcd-server.crt"), filepath.Join(pkiDir, "etcd-server.key"))
	if err != nil {
		return nil, fmt.Errorf("the etcd serving pair: %w", err)
	}
	caPEM, err := os.ReadFile(filepath.Join(pkiDir, etcdmember.ClientFiles[2]))
	if err != nil {
		return nil, fmt.Errorf("the etcd CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the etcd CA: no certificate")
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}, nil
}

// listenBeacon starts a beacon at addr.
func listenBeacon(addr string, cfg *tls.Config) (*beacon, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	b := &beacon{ln: ln, cfg: cfg}
	b.wg.Add(1)
	go b.serve()
	return b, nil
}

func (b *beacon) serve() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.answer(c)
		}()
	}
}

// answer completes the handshake with one prober and writes the banner.
func (b *beacon) answer(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	conn := tls.Server(c, b.cfg)
	if err := conn.Handshake(); err != nil {
		return
	}
	conn.Write([]byte(WaitingBanner))
}

// Close stops answering and waits until every answer is done, so the
// port is free for etcd.
func (b *beacon) Close() {
	b.once.Do(func() {
		b.ln.Close()
		b.wg.Wait()
	})
}

// waitingBeacon owns this master's beacon for one boot: started while
// the master waits to join with no etcd member of its own, stopped once
// the wait is over; a failed start is said once per boot.
type waitingBeacon struct {
	env    nodeEnv
	port   int // the etcd client port the beacon takes until etcd does
	b      *beacon
	failed bool
}

// start starts this master's beacon if it has none and no etcd
// member of its own (no membership record, no etcd data): from the add
// of its member on, its answer would no longer be true. A failure is
// logged once; the wait that calls it tries again on its next poll.
func (w *waitingBeacon) start() {
	if w.b != nil || w.env.hasEtcdData() {
		return
	}
	if _, err := etcdmember.Read(w.env.root); !errors.Is(err, etcdmember.ErrNone) {
		return
	}
	addr := net.JoinHostPort(w.env.file.Address, fmt.Sprint(w.port))
	cfg, err := beaconTLS(w.env.path(nodefile.PKIDir))
	if err == nil {
		w.b, err = listenBeacon(addr, cfg)
	}
	if err != nil {
		if !w.failed {
			w.env.log("the etcd port %s cannot answer a genesis node's survey yet (%v): it sees a refused or timed-out port instead", addr, err)
			w.failed = true
		}
		return
	}
	w.env.log("answering genesis surveys on %s: a master waiting to join, no etcd member yet", addr)
}

// stop closes the beacon, if one runs.
func (w *waitingBeacon) stop() {
	if w.b != nil {
		w.b.Close()
		w.b = nil
	}
}
