package serve

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/kiln-project/kiln/contract/netboot"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
)

// ServingCA is the CA kiln serve's certificate is issued from, and the
// one whose client certificates may arm a node: the site's Kubernetes CA.
var ServingCA = pki.KubernetesCA

// servingLeaf names the serving certificate; it is never written to the
// PKI directory.
const servingCN = "kiln-serve"

// ArmGroups are the client certificate organisations allowed to arm a
// node: the operator's admin credential (admin.crt), not a node's
// kubelet certificate from the same CA, nor a master's agent certificate
// (system:masters), so a master cannot arm another.
var ArmGroups = []string{nodefile.ClusterAdminsGroup}

// serving is the HTTPS listener's certificate and the CA it chains to.
type serving struct {
	cert tls.Certificate
	ca   *x509.Certificate
	pool *x509.CertPool
	pin  string
}

// newServing issues a serving certificate from the site's CA in dir. A
// PKI without the CA key serves no HTTPS (nil, nil); a broken one is a
// refusal.
func newServing(dir string, s *site.Site, hosts []string, now time.Time) (*serving, error) {
	st := pki.Store{Dir: dir, Now: func() time.Time { return now }}
	keyPath := filepath.Join(dir, filepath.FromSlash(ServingCA.Stem)+".key")
	if _, err := os.Stat(keyPath); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if _, err := st.Pair(ServingCA.Stem); err != nil {
		return nil, refuse(keyPath, "", "the site's CA: %v", err)
	}
	if hosts == nil {
		hosts = localHosts()
	}
	p, err := st.Sign(pki.Leaf{Stem: "kiln-serve", CA: ServingCA, CN: servingCN, Hosts: hosts, Server: true}, s.Cluster.LeafValidity())
	if err != nil {
		return nil, refuse(keyPath, "", "issuing the serving certificate: %v", err)
	}
	caPEM, err := st.Cert(ServingCA.Stem)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(caPEM)
	if block == nil {
		return nil, refuse(filepath.Join(dir, ServingCA.Stem+".crt"), "", "no PEM certificate")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, refuse(filepath.Join(dir, ServingCA.Stem+".crt"), "", "%v", err)
	}
	pair, err := tls.X509KeyPair(append(p.Cert, caPEM...), p.Key)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &serving{cert: pair, ca: ca, pool: pool, pin: netboot.CAPin(ca.Raw)}, nil
}

// config asks for a client certificate but does not require one: only
// POST /arm/ needs it, and checks it.
func (sv *serving) config() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{sv.cert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    sv.pool,
		MinVersion:   tls.VersionTLS12,
	}
}

// localHosts is this machine's name, every interface address and
// localhost: the names a node or the operator may reach it by.
func localHosts() []string {
	hosts := []string{"localhost"}
	if h, err := os.Hostname(); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLinkLocalUnicast() {
			hosts = append(hosts, ipn.IP.String())
		}
	}
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

// armer names the operator behind a verified client certificate of an
// allowed group, or "" when the request may not arm.
func armer(cs *tls.ConnectionState) string {
	if cs == nil || len(cs.VerifiedChains) == 0 {
		return ""
	}
	leaf := cs.VerifiedChains[0][0]
	for _, o := range leaf.Subject.Organization {
		if slices.Contains(ArmGroups, o) {
			return leaf.Subject.CommonName
		}
	}
	return ""
}
