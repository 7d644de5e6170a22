package pki

import (
	"bytes"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudflare/cfssl/helpers"

	"github.com/kiln-project/kiln/gen/site"
)

func loadSite(t *testing.T) *site.Site {
	t.Helper()
	s, err := site.Load("../../examples/site.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func parse(t *testing.T, st Store, stem string) *x509.Certificate {
	t.Helper()
	data, err := st.Cert(stem)
	if err != nil {
		t.Fatal(err)
	}
	c, err := helpers.ParseCertificatePEM(data)
	if err != nil {
		t.Fatalf("%s: %v", stem, err)
	}
	return c
}

// snapshot reads every file of the PKI directory.
func snapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out[p], _ = os.ReadFile(p)
		}
		return err
	})
	return out
}

func TestEnsureIssuesEveryCertificate(t *testing.T) {
	s := loadSite(t)
	st := Store{Dir: t.TempDir()}
	ch, err := st.Ensure(s)
	if err != nil {
		t.Fatal(err)
	}
	created := ch.Issued
	// 3 CAs, the SA key, the encryption key, 7 cluster leaves, 2 for the
	// static worker, 1 for the DHCP one (no serving certificate), 6 per master
	if want := 3 + 1 + 1 + 7 + 2 + 1 + 3*6; len(created) != want {
		t.Errorf("created %d: %v, want %d", len(created), created, want)
	}
	roots := map[string]*x509.CertPool{}
	for _, ca := range CAs {
		c := parse(t, st, ca.Stem)
		if !c.IsCA || c.Subject.CommonName != ca.CN {
			t.Errorf("CA %s: IsCA=%v CN=%q", ca.Stem, c.IsCA, c.Subject.CommonName)
		}
		if got := c.NotAfter.Sub(c.NotBefore); absDiff(got, s.Cluster.CAValidity()) > 10*time.Minute {
			t.Errorf("CA %s lives %s, want %s", ca.Stem, got, s.Cluster.CAValidity())
		}
		roots[ca.Stem] = x509.NewCertPool()
		roots[ca.Stem].AddCert(c)
	}
	for _, l := range Leaves(s) {
		t.Run(l.Stem, func(t *testing.T) {
			c := parse(t, st, l.Stem)
			if _, err := st.Pair(l.Stem); err != nil {
				t.Error(err)
			}
			if c.Subject.CommonName != l.CN || !slices.Equal(c.Subject.Organization, l.Orgs) {
				t.Errorf("subject %s, want CN=%s O=%v", c.Subject, l.CN, l.Orgs)
			}
			if c.IsCA {
				t.Error("a leaf is a CA")
			}
			if got := c.NotAfter.Sub(c.NotBefore); got != s.Cluster.LeafValidity() {
				t.Errorf("lives %s, want %s", got, s.Cluster.LeafValidity())
			}
			var usages []x509.ExtKeyUsage
			if l.Server {
				usages = append(usages, x509.ExtKeyUsageServerAuth)
			}
			if l.Client {
				usages = append(usages, x509.ExtKeyUsageClientAuth)
			}
			for _, u := range usages {
				if _, err := c.Verify(x509.VerifyOptions{Roots: roots[l.CA.Stem], KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
					t.Errorf("does not verify under %s for usage %v: %v", l.CA.Stem, u, err)
				}
			}
			for stem, pool := range roots {
				if stem == l.CA.Stem {
					continue
				}
				if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
					t.Errorf("verifies under the wrong CA %s", stem)
				}
			}
			if got, want := sans(c), sorted(l.Hosts); !slices.Equal(got, want) {
				t.Errorf("SANs %v, want %v", got, want)
			}
		})
	}
	if key, err := st.EncryptionKey(); err != nil || len(key) != 32 {
		t.Errorf("encryption key: %d bytes, %v; want 32", len(key), err)
	}
	for _, f := range []string{"sa.key", "encryption-key.b64", "ca.key", "nodes/w1/kubelet-client.key"} {
		fi, err := os.Stat(filepath.Join(st.Dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, %v; want 0600", f, fi.Mode(), err)
		}
	}
}

func TestAPIServerCertificateNames(t *testing.T) {
	s := loadSite(t)
	st := Store{Dir: t.TempDir()}
	if _, err := st.Ensure(s); err != nil {
		t.Fatal(err)
	}
	c := parse(t, st, "nodes/m2/apiserver")
	for _, host := range []string{
		"kube-apiserver.kiln.internal", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local", "localhost", "10.96.0.1", "127.0.0.1",
		"192.168.10.11", "192.168.10.12", "192.168.10.13",
	} {
		if err := c.VerifyHostname(host); err != nil {
			t.Errorf("apiserver certificate: %v", err)
		}
	}
	if err := c.VerifyHostname("192.168.10.21"); err == nil {
		t.Error("the apiserver certificate names a worker's address")
	}
	k := parse(t, st, "nodes/w1/kubelet-client")
	if k.Subject.CommonName != "system:node:w1" || !slices.Equal(k.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("kubelet client subject %s", k.Subject)
	}
}

func TestSecondRunReusesAndAddsOnlyTheNewNode(t *testing.T) {
	s := loadSite(t)
	st := Store{Dir: t.TempDir()}
	if _, err := st.Ensure(s); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, st.Dir)
	ch, err := st.Ensure(s)
	if err != nil || len(ch.Issued)+len(ch.Reissued)+len(ch.Notes) != 0 {
		t.Fatalf("second run did %+v, %v; want nothing", ch, err)
	}
	if after := snapshot(t, st.Dir); !sameFiles(before, after) {
		t.Fatal("second run changed the PKI")
	}

	s.Nodes = append(s.Nodes, site.Node{Name: "w3", Role: site.RoleWorker, MACs: []string{"52:54:00:10:00:23"},
		Network: site.Network{Address: "192.168.10.23/24", Gateway: "192.168.10.1"}})
	ch, err = st.Ensure(s)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"nodes/w3/kubelet-client", "nodes/w3/kubelet-server"}; !slices.Equal(ch.Issued, want) || len(ch.Reissued) != 0 {
		t.Errorf("adding a worker issued %v and re-issued %v, want %v and nothing", ch.Issued, ch.Reissued, want)
	}
	after := snapshot(t, st.Dir)
	for p, data := range before {
		if !bytes.Equal(after[p], data) {
			t.Errorf("adding a node changed %s", p)
		}
	}
}

func TestHalfAPairIsAnErrorNotReplaced(t *testing.T) {
	s := loadSite(t)
	st := Store{Dir: t.TempDir()}
	if _, err := st.Ensure(s); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(st.Dir, "nodes/w1/kubelet-client.key"))
	crt, _ := os.ReadFile(filepath.Join(st.Dir, "nodes/w1/kubelet-client.crt"))
	_, err := st.Ensure(s)
	if err == nil || !strings.Contains(err.Error(), "nodes/w1/kubelet-client.key: missing") {
		t.Fatalf("got %v, want an error naming the missing key", err)
	}
	if now, _ := os.ReadFile(filepath.Join(st.Dir, "nodes/w1/kubelet-client.crt")); !bytes.Equal(now, crt) {
		t.Error("the certificate of a half pair was replaced")
	}

	// a key that does not belong to its certificate
	other, _ := os.ReadFile(filepath.Join(st.Dir, "nodes/w2/kubelet-client.key"))
	os.WriteFile(filepath.Join(st.Dir, "nodes/w1/kubelet-client.key"), other, 0o600)
	if _, err := st.Ensure(s); err == nil || !strings.Contains(err.Error(), "do not belong together") {
		t.Fatalf("got %v, want a mismatch error", err)
	}
}

func TestRenewReissuesLeavesCloseToExpiryUnderTheSameCA(t *testing.T) {
	s := loadSite(t)
	s.Cluster.Certificates.LeafValidity = "240h" // 10 days
	now := time.Now()
	st := Store{Dir: t.TempDir(), Now: func() time.Time { return now }}
	if _, err := st.Ensure(s); err != nil {
		t.Fatal(err)
	}
	caBefore, _ := st.Cert("ca")
	oldAdmin, _ := st.Pair("admin")

	renewed, err := st.Renew(s, 5*24*time.Hour) // nothing expires within 5 days
	if err != nil || len(renewed) != 0 {
		t.Fatalf("renew within 5d: %v, %v; want nothing", renewed, err)
	}

	s.Cluster.Certificates.LeafValidity = "8760h"
	renewed, err = st.Renew(s, 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(renewed) != len(Leaves(s)) {
		t.Errorf("renewed %d, want every leaf (%d)", len(renewed), len(Leaves(s)))
	}
	if caAfter, _ := st.Cert("ca"); !bytes.Equal(caBefore, caAfter) {
		t.Error("renewal replaced the CA")
	}
	ca := parse(t, st, "ca")
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	admin := parse(t, st, "admin")
	if _, err := admin.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("renewed admin certificate: %v", err)
	}
	if got := admin.NotAfter.Sub(admin.NotBefore); got != 8760*time.Hour {
		t.Errorf("renewed lifetime %s", got)
	}
	backups, _ := filepath.Glob(filepath.Join(st.Dir, "backup", "*", "admin.crt"))
	if len(backups) != 1 {
		t.Fatalf("backups of admin.crt: %v", backups)
	}
	if b, _ := os.ReadFile(backups[0]); !bytes.Equal(b, oldAdmin.Cert) {
		t.Error("the backup is not the old certificate")
	}
	infos, problems, err := st.Check(nil, 0)
	if err != nil || len(problems) != 0 {
		t.Fatalf("check after renewal: %v, %v", problems, err)
	}
	for _, i := range infos {
		if strings.HasPrefix(i.Stem, "backup") {
			t.Errorf("check lists a backup: %s", i.Stem)
		}
		if !i.IsCA && i.Remaining(now) < 300*24*time.Hour {
			t.Errorf("%s still expires in %s after renewal", i.Stem, i.Remaining(now))
		}
	}
	if want := len(CAs) + len(Leaves(s)); len(infos) != want {
		t.Errorf("check listed %d certificates, want %d", len(infos), want)
	}
}

func sans(c *x509.Certificate) []string {
	var out []string
	out = append(out, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	return sorted(out)
}

func sorted(in []string) []string {
	out := make([]string, 0, len(in))
	for _, h := range in {
		if ip := net.ParseIP(h); ip != nil {
			h = ip.String()
		}
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

func sameFiles(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(b[k], v) {
			return false
		}
	}
	return true
}

func absDiff(a, b time.Duration) time.Duration {
	if a > b {
		return a - b
	}
	return b - a
}

// A node's certificates are re-issued at once, whatever their expiry,
// with new keys; every other certificate stays as it was.
func TestRenewNodeReissuesThatNodesCertificatesOnly(t *testing.T) {
	s := loadSite(t)
	st := Store{Dir: t.TempDir()}
	if _, err := st.Ensure(s); err != nil {
		t.Fatal(err)
	}
	var master, worker site.Node
	for _, n := range s.Nodes {
		switch {
		case n.IsMaster() && master.Name == "":
			master = n
		case !n.IsMaster() && worker.Name == "":
			worker = n
		}
	}
	before := map[string]Pair{}
	for _, l := range Leaves(s) {
		before[l.Stem], _ = st.Pair(l.Stem)
	}
	for _, tc := range []struct {
		name    string
		node    string
		want    []Leaf
		wantErr error
	}{
		{name: "a worker", node: worker.Name, want: NodeLeaves(s, worker)},
		{name: "a master", node: master.Name, want: NodeLeaves(s, master)},
		{name: "a name the site does not give", node: "nope", wantErr: ErrUnknownNode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			renewed, err := st.RenewNode(s, tc.node)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("RenewNode(%s): %v, want %v", tc.node, err, tc.wantErr)
			}
			var want []string
			for _, l := range tc.want {
				want = append(want, l.Stem)
			}
			if !slices.Equal(renewed, want) {
				t.Fatalf("renewed %v, want %v", renewed, want)
			}
			for _, stem := range want {
				p, err := st.Pair(stem)
				if err != nil {
					t.Fatal(err)
				}
				if bytes.Equal(p.Key, before[stem].Key) || bytes.Equal(p.Cert, before[stem].Cert) {
					t.Errorf("%s: the same pair as before", stem)
				}
				before[stem] = p
			}
		})
	}
	for _, l := range Leaves(s) {
		if p, _ := st.Pair(l.Stem); !bytes.Equal(p.Cert, before[l.Stem].Cert) {
			t.Errorf("%s changed, and was not renewed", l.Stem)
		}
	}
	if _, problems, err := st.Check(s, 0); err != nil || len(problems) != 0 {
		t.Fatalf("check after renewal: %v, %v", problems, err)
	}
}
