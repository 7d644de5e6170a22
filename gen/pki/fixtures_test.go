package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/gen/site"
)

// The fixtures below break a complete PKI in one way each.

func freshStore(t *testing.T, s *site.Site) Store {
	t.Helper()
	st := Store{Dir: t.TempDir()}
	if _, err := st.Ensure(s); err != nil {
		t.Fatal(err)
	}
	return st
}

func leafOf(t *testing.T, s *site.Site, stem string) Leaf {
	t.Helper()
	for _, l := range Leaves(s) {
		if l.Stem == stem {
			return l
		}
	}
	t.Fatalf("the site has no leaf %s", stem)
	return Leaf{}
}

// foreignPair is stem's pair as another PKI for the same site holds it:
// the same names, signed by another CA of the same name.
func foreignPair(t *testing.T, s *site.Site, stem string) Pair {
	t.Helper()
	p, err := freshStore(t, s).Pair(stem)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func putPair(t *testing.T, st Store, stem string, p Pair) {
	t.Helper()
	if err := st.write(stem, p); err != nil {
		t.Fatal(err)
	}
}

// issueAt issues l as if the clock said at.
func issueAt(t *testing.T, st Store, l Leaf, validity time.Duration, at time.Time) {
	t.Helper()
	if err := (Store{Dir: st.Dir, Now: func() time.Time { return at }}).issue(l, validity); err != nil {
		t.Fatal(err)
	}
}

// expiredCA puts a self-signed CA that expired yesterday at ca's stem.
func expiredCA(t *testing.T, st Store, ca CA) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: ca.CN, Organization: []string{"kiln"}},
		NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	putPair(t, st, ca.Stem, Pair{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	})
}

// otherPublicKey is the PEM public half of a new key.
func otherPublicKey(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func writeFile(t *testing.T, st Store, rel string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(st.Dir, rel), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, st Store, from, to string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(st.Dir, from))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, st, to, data)
}

func remove(t *testing.T, st Store, rel string) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(st.Dir, rel)); err != nil {
		t.Fatal(err)
	}
}

// fileInPlaceOfDir replaces the directory rel by a regular file.
func fileInPlaceOfDir(t *testing.T, st Store, rel string) {
	t.Helper()
	remove(t, st, rel)
	writeFile(t, st, rel, []byte("not a directory"))
}

// dirInPlaceOfFile replaces the file rel by a directory.
func dirInPlaceOfFile(t *testing.T, st Store, rel string) {
	t.Helper()
	remove(t, st, rel)
	if err := os.Mkdir(filepath.Join(st.Dir, rel), 0o700); err != nil {
		t.Fatal(err)
	}
}

// want is a problem a test expects: the file, relative to the PKI
// directory, and words of what is wrong with it.
type want struct{ rel, says string }

// checkProblems asserts that ps holds exactly one problem per want, each
// naming its file.
func checkProblems(t *testing.T, dir string, ps Problems, wants []want) {
	t.Helper()
	left := append(Problems{}, ps...)
	for _, w := range wants {
		path := filepath.Join(dir, filepath.FromSlash(w.rel))
		found := -1
		for i, p := range left {
			if p.Path == path && strings.Contains(p.What, w.says) {
				found = i
				break
			}
		}
		if found < 0 {
			t.Errorf("no problem at %s saying %q", w.rel, w.says)
			continue
		}
		left = append(left[:found], left[found+1:]...)
	}
	for _, p := range left {
		t.Errorf("unexpected problem: %s", p)
	}
}
