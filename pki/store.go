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
	"time"

	cfconfig "github.com/cloudflare/cfssl/config"
	"github.com/cloudflare/cfssl/csr"
	"github.com/cloudflare/cfssl/helpers"
	"github.com/cloudflare/cfssl/initca"
	cflog "github.com/cloudflare/cfssl/log"
	"github.com/cloudflare/cfssl/signer"
	"github.com/cloudflare/cfssl/signer/local"

	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/site"
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

// Ensure creates every CA, key and certificate the site needs that the
// directory does not hold yet, and returns the stems it created. Existing
// files are reused as they are, never overwritten.
func (st Store) Ensure(s *site.Site) ([]string, error) {
	var created []string
	caValidity, leafValidity := s.Cluster.CAValidity(), s.Cluster.LeafValidity()
	for _, ca := range CAs {
		made, err := st.ensureCA(ca, caValidity)
		if err != nil {
			return created, err
		}
		if made {
			created = append(created, ca.Stem)
		}
	}
	made, err := st.ensureServiceAccountKey()
	if err != nil {
		return created, err
	}
	if made {
		created = append(created, ServiceAccountKey)
	}
	for _, l := range Leaves(s) {
		_, have, err := st.lookup(l.Stem)
		if err != nil {
			return created, err
		}
		if have {
			continue
		}
		if err := st.issue(l, leafValidity); err != nil {
			return created, err
		}
		created = append(created, l.Stem)
	}
	return created, nil
}

// lookup returns stem's pair when its certificate and key both exist and
// belong together; ok is false when neither exists. One without the other
// is an error, never silently replaced.
func (st Store) lookup(stem string) (p Pair, ok bool, err error) {
	_, errC := os.Stat(st.path(stem, ".crt"))
	_, errK := os.Stat(st.path(stem, ".key"))
	switch {
	case errC == nil && errK == nil:
		p, err := st.Pair(stem)
		return p, err == nil, err
	case errors.Is(errC, fs.ErrNotExist) && errors.Is(errK, fs.ErrNotExist):
		return Pair{}, false, nil
	case errC == nil:
		return Pair{}, false, fmt.Errorf("%s exists but %s does not: restore the key (see %s) or move the certificate away; kiln does not replace half a pair",
			st.path(stem, ".crt"), st.path(stem, ".key"), filepath.Join(st.Dir, "backup"))
	case errK == nil:
		return Pair{}, false, fmt.Errorf("%s exists but %s does not: restore the certificate or move the key away; kiln does not replace half a pair",
			st.path(stem, ".key"), st.path(stem, ".crt"))
	default:
		return Pair{}, false, fmt.Errorf("%s: %w", stem, errors.Join(errC, errK))
	}
}

func (st Store) ensureCA(ca CA, validity time.Duration) (bool, error) {
	_, have, err := st.lookup(ca.Stem)
	if err != nil || have {
		return false, err
	}
	cert, _, key, err := initca.New(&csr.CertificateRequest{
		CN:         ca.CN,
		Names:      []csr.Name{{O: "kiln"}},
		KeyRequest: &csr.KeyRequest{A: "ecdsa", S: 256},
		CA:         &csr.CAConfig{Expiry: validity.String()},
	})
	if err != nil {
		return false, fmt.Errorf("creating CA %s: %w", ca.Stem, err)
	}
	return true, st.write(ca.Stem, Pair{Cert: cert, Key: key})
}

func (st Store) ensureServiceAccountKey() (bool, error) {
	_, errPriv := os.Stat(st.path(ServiceAccountKey, ".key"))
	_, errPub := os.Stat(st.path(ServiceAccountKey, ".pub"))
	if errPriv == nil && errPub == nil {
		return false, nil
	}
	if errPriv == nil || errPub == nil {
		return false, fmt.Errorf("only one of %s.key and %s.pub exists in %s: restore the other; kiln does not replace half a pair", ServiceAccountKey, ServiceAccountKey, st.Dir)
	}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return false, err
	}
	der, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		return false, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		return false, err
	}
	if err := st.writeFile(ServiceAccountKey+".key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return false, err
	}
	return true, st.writeFile(ServiceAccountKey+".pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

// issue makes a new key and certificate for l under its CA.
func (st Store) issue(l Leaf, validity time.Duration) error {
	caPair, err := st.Pair(l.CA.Stem)
	if err != nil {
		return fmt.Errorf("issuing %s: %w", l.Stem, err)
	}
	caCert, err := helpers.ParseCertificatePEM(caPair.Cert)
	if err != nil {
		return fmt.Errorf("issuing %s: CA %s: %w", l.Stem, l.CA.Stem, err)
	}
	caKey, err := helpers.ParsePrivateKeyPEM(caPair.Key)
	if err != nil {
		return fmt.Errorf("issuing %s: CA key %s: %w", l.Stem, l.CA.Stem, err)
	}
	req := &csr.CertificateRequest{CN: l.CN, KeyRequest: &csr.KeyRequest{A: "ecdsa", S: 256}}
	for _, o := range l.Orgs {
		req.Names = append(req.Names, csr.Name{O: o})
	}
	csrPEM, key, err := csr.ParseRequest(req)
	if err != nil {
		return fmt.Errorf("issuing %s: key and request: %w", l.Stem, err)
	}
	policy := &cfconfig.Signing{Default: &cfconfig.SigningProfile{Usage: l.usages(), Expiry: validity, ExpiryString: validity.String()}}
	sg, err := local.NewSigner(caKey, caCert, signer.DefaultSigAlgo(caKey), policy)
	if err != nil {
		return fmt.Errorf("issuing %s: %w", l.Stem, err)
	}
	notBefore := st.now().Add(-5 * time.Minute).UTC().Truncate(time.Second)
	cert, err := sg.Sign(signer.SignRequest{
		Request: string(csrPEM), Hosts: l.Hosts,
		NotBefore: notBefore, NotAfter: notBefore.Add(validity),
	})
	if err != nil {
		return fmt.Errorf("issuing %s: signing: %w", l.Stem, err)
	}
	return st.write(l.Stem, Pair{Cert: cert, Key: key})
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
	var p Pair
	var err error
	if p.Cert, err = os.ReadFile(st.path(stem, ".crt")); err != nil {
		return Pair{}, err
	}
	if p.Key, err = os.ReadFile(st.path(stem, ".key")); err != nil {
		return Pair{}, err
	}
	cert, err := helpers.ParseCertificatePEM(p.Cert)
	if err != nil {
		return Pair{}, fmt.Errorf("%s: %w", st.path(stem, ".crt"), err)
	}
	key, err := helpers.ParsePrivateKeyPEM(p.Key)
	if err != nil {
		return Pair{}, fmt.Errorf("%s: %w", st.path(stem, ".key"), err)
	}
	if !samePublicKey(cert.PublicKey, key.Public()) {
		return Pair{}, fmt.Errorf("%s and %s do not belong together (an interrupted renewal? the previous pair is under %s)",
			st.path(stem, ".crt"), st.path(stem, ".key"), filepath.Join(st.Dir, "backup"))
	}
	return p, nil
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
