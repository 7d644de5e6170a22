package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	cfconfig "github.com/cloudflare/cfssl/config"
	"github.com/cloudflare/cfssl/csr"
	"github.com/cloudflare/cfssl/initca"
	cflog "github.com/cloudflare/cfssl/log"
	"github.com/cloudflare/cfssl/signer"
	"github.com/cloudflare/cfssl/signer/local"

	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/atomicfile"
)

// cfssl logs every certificate it signs at INFO; kiln reports what it
// issued itself.
func init() { cflog.Level = cflog.LevelError }

// Store is a PKI directory.
type Store struct {
	Dir string
	// Now is the clock used for lifetimes and renewal; nil: time.Now.
	Now func() time.Time
}

// Pair is a certificate and its private key, PEM encoded.
type Pair struct {
	Cert, Key []byte
}

func (st Store) now() time.Time {
	if st.Now != nil {
		return st.Now()
	}
	return time.Now()
}

func (st Store) path(stem, ext string) string {
	return filepath.Join(st.Dir, filepath.FromSlash(stem)+ext)
}

// Changes is what Ensure did to the PKI directory.
type Changes struct {
	Issued   []string  // stems issued because they were missing
	Reissued []Reissue // leaves replaced because they no longer fit the site
	Notes    []string  // what the operator should know, e.g. a CA close to expiry
}

// Reissue is a leaf Ensure replaced: why, and where the old pair went.
type Reissue struct {
	Stem   string
	Why    []string
	Backup string // the directory holding the old pair, under its stem
}

func (r Reissue) String() string {
	return fmt.Sprintf("%s: %s (the old pair is in %s)", r.Stem, strings.Join(r.Why, "; "), r.Backup)
}

// plan is what Ensure will do, decided before anything is written.
type plan struct {
	newCAs  []CA
	newSA   bool
	newEnc  bool
	issue   []Leaf
	reissue []reissue
	notes   []string
}

type reissue struct {
	leaf Leaf
	old  Pair
	why  []string
}

// Ensure makes the directory hold what the site needs: it creates what is
// missing and re-issues, under the CA that signs it now, every leaf that
// no longer fits the site (signed by another CA, expired or inside its
// renew window, another subject, SANs, usages or lifetime), the old pair
// moved to backup/<time>/ first. It reads the whole directory before it
// writes anything: a CA it cannot sign with, a key that does not parse or
// belong to its certificate, half a pair, and anything else only the
// operator can settle are Problems, all reported and nothing written.
func (st Store) Ensure(s *site.Site) (Changes, error) {
	p, err := st.plan(s)
	if err != nil {
		return Changes{Notes: p.notes}, err
	}
	return st.apply(s, p)
}

func (st Store) plan(s *site.Site) (plan, error) {
	var p plan
	var ps Problems
	now := st.now()
	cas := map[string]*x509.Certificate{}
	for _, ca := range CAs {
		e, ok, bad := st.read(ca.Stem)
		ps.add(bad...)
		switch {
		case len(bad) > 0:
		case !ok:
			p.newCAs = append(p.newCAs, ca)
		default:
			if bad := st.caProblems(ca, e.cert, now); len(bad) > 0 {
				ps.add(bad...)
				continue
			}
			cas[ca.Stem] = e.cert
			if due := expiry(e.cert, now, RenewWindow(lifetime(e.cert))); due != "" {
				p.notes = append(p.notes, fmt.Sprintf("CA %s %s: kiln never re-issues a CA; plan a new PKI before then", st.path(ca.Stem, ".crt"), due))
			}
		}
	}
	ok, bad := st.readServiceAccount()
	ps.add(bad...)
	p.newSA = !ok && len(bad) == 0
	_, ok, bad = st.readEncryptionKey()
	ps.add(bad...)
	p.newEnc = !ok && len(bad) == 0
	orphaned := map[CA]bool{} // missing CAs whose leaves exist
	for _, l := range Leaves(s) {
		e, ok, bad := st.read(l.Stem)
		ps.add(bad...)
		switch {
		case len(bad) > 0:
		case !ok:
			p.issue = append(p.issue, l)
		case slices.Contains(p.newCAs, l.CA):
			if !orphaned[l.CA] {
				ps.add(Problem{st.path(l.CA.Stem, ".crt"), fmt.Sprintf("missing, while %s, which it signed, exists: %s",
					st.path(l.Stem, ".crt"), caWayOut(st, l.CA.Stem))})
			}
			orphaned[l.CA] = true
		case cas[l.CA.Stem] != nil:
			if why := leafDue(l, e.cert, cas[l.CA.Stem], s.Cluster.LeafValidity(), now); len(why) > 0 {
				p.reissue = append(p.reissue, reissue{l, e.Pair, why})
			}
		}
	}
	return p, ps.Err()
}

// leafDue lists why a leaf on disk must be re-issued under ca, nothing
// when it can be reused.
func leafDue(l Leaf, cert, ca *x509.Certificate, validity time.Duration, now time.Time) []string {
	why := misfit(l, cert, ca, validity)
	if due := expiry(cert, now, RenewWindow(lifetime(cert))); due != "" {
		why = append(why, due)
	}
	return why
}

func (st Store) apply(s *site.Site, p plan) (Changes, error) {
	ch := Changes{Notes: p.notes}
	for _, ca := range p.newCAs {
		if err := st.createCA(ca, s.Cluster.CAValidity()); err != nil {
			return ch, err
		}
		ch.Issued = append(ch.Issued, ca.Stem)
	}
	if p.newSA {
		if err := st.createServiceAccountKey(); err != nil {
			return ch, err
		}
		ch.Issued = append(ch.Issued, ServiceAccountKey)
	}
	if p.newEnc {
		if err := st.createEncryptionKey(); err != nil {
			return ch, err
		}
		ch.Issued = append(ch.Issued, EncryptionKeyFile)
	}
	for _, l := range p.issue {
		if err := st.issue(l, s.Cluster.LeafValidity()); err != nil {
			return ch, err
		}
		ch.Issued = append(ch.Issued, l.Stem)
	}
	var backup string
	for _, r := range p.reissue {
		if backup == "" {
			var err error
			if backup, err = st.newBackupDir(); err != nil {
				return ch, err
			}
		}
		if err := st.replace(backup, r.leaf, r.old, s.Cluster.LeafValidity()); err != nil {
			return ch, err
		}
		ch.Reissued = append(ch.Reissued, Reissue{Stem: r.leaf.Stem, Why: r.why, Backup: backup})
	}
	return ch, nil
}

// replace issues l anew, after copying its old pair into backup.
func (st Store) replace(backup string, l Leaf, old Pair, validity time.Duration) error {
	if err := (Store{Dir: backup}).write(l.Stem, old); err != nil {
		return fmt.Errorf("backing up %s before re-issuing it: %w", st.path(l.Stem, ".crt"), err)
	}
	return st.issue(l, validity)
}

// newBackupDir creates backup/<UTC time>/ (with a suffix when a backup of
// the same second exists), so that no earlier backup is ever written over.
func (st Store) newBackupDir() (string, error) {
	root := filepath.Join(st.Dir, "backup")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmt.Errorf("creating %s: %w", root, err)
	}
	base := filepath.Join(root, st.now().UTC().Format("20060102T150405Z"))
	for i := 0; ; i++ {
		dir := base
		if i > 0 {
			dir = fmt.Sprintf("%s-%d", base, i)
		}
		err := os.Mkdir(dir, 0o700)
		if err == nil {
			return dir, atomicfile.SyncDir(root)
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("creating %s: %w", dir, err)
		}
	}
}

func (st Store) createCA(ca CA, validity time.Duration) error {
	cert, _, key, err := initca.New(&csr.CertificateRequest{
		CN:         ca.CN,
		Names:      []csr.Name{{O: "kiln"}},
		KeyRequest: &csr.KeyRequest{A: "ecdsa", S: 256},
		CA:         &csr.CAConfig{Expiry: validity.String()},
	})
	if err != nil {
		return fmt.Errorf("creating CA %s: %w", st.path(ca.Stem, ".crt"), err)
	}
	return st.write(ca.Stem, Pair{Cert: cert, Key: key})
}

func (st Store) createServiceAccountKey() error {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		return err
	}
	if err := st.writeFile(ServiceAccountKey+".key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return err
	}
	return st.writeFile(ServiceAccountKey+".pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

// issue makes a new key and certificate for l under its CA.
func (st Store) issue(l Leaf, validity time.Duration) error {
	p, err := st.Sign(l, validity)
	if err != nil {
		return err
	}
	return st.write(l.Stem, p)
}

// Sign makes a new key and certificate for l under its CA, valid for
// validity from now (less five minutes of clock skew), and returns them
// without writing anything: kiln serve's serving certificate lives only
// as long as the server.
func (st Store) Sign(l Leaf, validity time.Duration) (Pair, error) {
	ca, err := st.signer(l.CA)
	if err != nil {
		return Pair{}, fmt.Errorf("issuing %s: %w", st.path(l.Stem, ".crt"), err)
	}
	req := &csr.CertificateRequest{CN: l.CN, KeyRequest: &csr.KeyRequest{A: "ecdsa", S: 256}}
	for _, o := range l.Orgs {
		req.Names = append(req.Names, csr.Name{O: o})
	}
	csrPEM, key, err := csr.ParseRequest(req)
	if err != nil {
		return Pair{}, fmt.Errorf("issuing %s: key and request: %w", l.Stem, err)
	}
	policy := &cfconfig.Signing{Default: &cfconfig.SigningProfile{Usage: l.usages(), Expiry: validity, ExpiryString: validity.String()}}
	sg, err := local.NewSigner(ca.key, ca.cert, signer.DefaultSigAlgo(ca.key), policy)
	if err != nil {
		return Pair{}, fmt.Errorf("issuing %s: %w", l.Stem, err)
	}
	notBefore := st.now().Add(-5 * time.Minute).UTC().Truncate(time.Second)
	cert, err := sg.Sign(signer.SignRequest{
		Request: string(csrPEM), Hosts: l.Hosts,
		NotBefore: notBefore, NotAfter: notBefore.Add(validity),
	})
	if err != nil {
		return Pair{}, fmt.Errorf("issuing %s: signing: %w", l.Stem, err)
	}
	return Pair{Cert: cert, Key: key}, nil
}

// signer is ca's pair, to sign with.
func (st Store) signer(ca CA) (entry, error) {
	e, ok, ps := st.read(ca.Stem)
	switch {
	case len(ps) > 0:
		return entry{}, ps
	case !ok:
		return entry{}, fmt.Errorf("CA %s: %w", st.path(ca.Stem, ".crt"), fs.ErrNotExist)
	}
	return e, nil
}

// write stores a pair, the key first and mode 0600, each file atomically.
func (st Store) write(stem string, p Pair) error {
	if err := st.writeFile(stem+".key", p.Key, 0o600); err != nil {
		return err
	}
	return st.writeFile(stem+".crt", p.Cert, 0o644)
}

func (st Store) writeFile(rel string, data []byte, mode os.FileMode) error {
	path := filepath.Join(st.Dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, data, mode, nil); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// Pair reads stem's certificate and key and checks that they belong
// together.
func (st Store) Pair(stem string) (Pair, error) {
	e, ok, ps := st.read(stem)
	switch {
	case len(ps) > 0:
		return Pair{}, ps
	case !ok:
		return Pair{}, fmt.Errorf("%s: %w", st.path(stem, ".crt"), fs.ErrNotExist)
	}
	return e.Pair, nil
}

// Cert reads stem's certificate alone (a CA's, for a node that must not
// hold its key).
func (st Store) Cert(stem string) ([]byte, error) { return os.ReadFile(st.path(stem, ".crt")) }

// File reads a file of the PKI by its name relative to the directory.
func (st Store) File(rel string) ([]byte, error) {
	return os.ReadFile(filepath.Join(st.Dir, filepath.FromSlash(rel)))
}

func samePublicKey(a, b crypto.PublicKey) bool {
	da, errA := x509.MarshalPKIXPublicKey(a)
	db, errB := x509.MarshalPKIXPublicKey(b)
	return errA == nil && errB == nil && bytes.Equal(da, db)
}
