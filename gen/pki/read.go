package pki

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Problem is one thing wrong in the PKI directory, at the file at fault.
type Problem struct {
	Path string
	What string // what is wrong and, when there is one, the way out
}

func (p Problem) Error() string { return p.Path + ": " + p.What }

// Problems is every problem found in a PKI directory, one line each.
type Problems []Problem

func (ps *Problems) add(more ...Problem) {
	for _, p := range more {
		if !ps.has(p) {
			*ps = append(*ps, p)
		}
	}
}

func (ps Problems) has(p Problem) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// Err is nil when nothing was found, otherwise the list itself.
func (ps Problems) Err() error {
	if len(ps) == 0 {
		return nil
	}
	return ps
}

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.Error()
	}
	return fmt.Sprintf("%d problem(s):\n  %s", len(ps), strings.Join(lines, "\n  "))
}

// entry is a certificate and its key as read from the directory, with the
// exact bytes of both files.
type entry struct {
	Pair
	cert *x509.Certificate
	key  crypto.Signer
}

// halfPair is the way out of a pair with one file missing.
func (st Store) halfPair(stem string) string {
	if isCA(stem) {
		return caWayOut(st, stem)
	}
	return fmt.Sprintf("restore it (a renewal's previous pair is under %s) or move the other file away; kiln does not replace half a pair",
		filepath.Join(st.Dir, "backup"))
}

// read loads stem's certificate and key. ok is false when neither file
// exists; any other state than a certificate with the key that belongs to
// it is a problem naming the file at fault.
func (st Store) read(stem string) (e entry, ok bool, ps Problems) {
	crtPath, keyPath := st.path(stem, ".crt"), st.path(stem, ".key")
	crt, haveCrt, pc := st.readFile(crtPath)
	key, haveKey, pk := st.readFile(keyPath)
	ps.add(append(pc, pk...)...)
	switch {
	case haveCrt && !haveKey && len(pk) == 0:
		ps.add(Problem{keyPath, fmt.Sprintf("missing, while %s exists: %s", crtPath, st.halfPair(stem))})
	case haveKey && !haveCrt && len(pc) == 0:
		ps.add(Problem{crtPath, fmt.Sprintf("missing, while %s exists: %s", keyPath, st.halfPair(stem))})
	}
	var err error
	if haveCrt {
		if e.cert, err = parseCert(crt); err != nil {
			ps.add(Problem{crtPath, err.Error()})
		}
	}
	if haveKey {
		if e.key, err = parseKey(key); err != nil {
			ps.add(Problem{keyPath, err.Error()})
		}
	}
	if len(ps) > 0 || !haveCrt || !haveKey {
		return entry{}, false, ps
	}
	if !samePublicKey(e.cert.PublicKey, e.key.Public()) {
		return entry{}, false, Problems{{keyPath, fmt.Sprintf("does not belong to %s: %s", crtPath, st.mismatchWayOut(stem))}}
	}
	e.Pair = Pair{Cert: crt, Key: key}
	return e, true, nil
}

func (st Store) mismatchWayOut(stem string) string {
	if isCA(stem) {
		return caWayOut(st, stem)
	}
	return fmt.Sprintf("the two do not belong together (an interrupted renewal? the previous pair is under %s): restore the matching file, or move both away for kiln gen to issue a new pair",
		filepath.Join(st.Dir, "backup"))
}

// readFile reads one file of the directory. ok is false when it does not
// exist; a directory in its place, or a file where a directory on its way
// should be, is a problem.
func (st Store) readFile(path string) (data []byte, ok bool, ps Problems) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, false, nil
	case errors.Is(err, syscall.ENOTDIR):
		return nil, false, Problems{{st.fileInTheWay(path), fileForDir}}
	case err != nil:
		return nil, false, Problems{{path, unwrapPath(err).Error()}}
	case fi.IsDir():
		return nil, false, Problems{{path, "a directory where a file is expected"}}
	}
	data, err = os.ReadFile(path)
	if err != nil {
		return nil, false, Problems{{path, unwrapPath(err).Error()}}
	}
	return data, true, nil
}

// fileInTheWay is the first path between the directory and path that is
// not a directory.
func (st Store) fileInTheWay(path string) string {
	rel, err := filepath.Rel(st.Dir, path)
	if err != nil {
		return path
	}
	at := st.Dir
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		if fi, err := os.Stat(at); err == nil && !fi.IsDir() {
			return at
		}
		at = filepath.Join(at, part)
	}
	return path
}

const fileForDir = "a file where a directory is expected"

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func parseCert(data []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("not a PEM certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("not a certificate: %w", err)
	}
	return c, nil
}

func parseKey(data []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(data)
	if b == nil || !strings.HasSuffix(b.Type, "PRIVATE KEY") {
		return nil, errors.New("not a PEM private key")
	}
	if k, err := x509.ParsePKCS8PrivateKey(b.Bytes); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
	}
	if k, err := x509.ParseECPrivateKey(b.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PrivateKey(b.Bytes); err == nil {
		return k, nil
	}
	return nil, fmt.Errorf("not a private key (%s that parses as neither PKCS #8, SEC 1 nor PKCS #1)", b.Type)
}

func parsePublicKey(data []byte) (crypto.PublicKey, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "PUBLIC KEY" {
		return nil, errors.New("not a PEM public key")
	}
	k, err := x509.ParsePKIXPublicKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("not a public key: %w", err)
	}
	return k, nil
}

// readServiceAccount checks sa.key and sa.pub. ok is false when neither
// exists; anything but a private key and its public half is a problem.
func (st Store) readServiceAccount() (ok bool, ps Problems) {
	privPath, pubPath := st.path(ServiceAccountKey, ".key"), st.path(ServiceAccountKey, ".pub")
	derive := fmt.Sprintf("openssl pkey -in %s -pubout -out %s", privPath, pubPath)
	priv, havePriv, pp := st.readFile(privPath)
	pub, havePub, pb := st.readFile(pubPath)
	ps.add(append(pp, pb...)...)
	switch {
	case havePriv && !havePub && len(pb) == 0:
		ps.add(Problem{pubPath, fmt.Sprintf("missing, while %s exists: restore it, or derive it: %s", privPath, derive)})
	case havePub && !havePriv && len(pp) == 0:
		ps.add(Problem{privPath, fmt.Sprintf("missing, while %s exists: restore it; only if it is lost, move %s away for kiln gen to make a new pair (every service-account token issued so far stops verifying)", pubPath, pubPath)})
	}
	var key crypto.Signer
	var pk crypto.PublicKey
	var err error
	if havePriv {
		if key, err = parseKey(priv); err != nil {
			ps.add(Problem{privPath, err.Error() + ": restore it from your copy of the PKI"})
		}
	}
	if havePub {
		if pk, err = parsePublicKey(pub); err != nil {
			ps.add(Problem{pubPath, fmt.Sprintf("%v: restore it, or derive it: %s", err, derive)})
		}
	}
	if len(ps) > 0 || !havePriv || !havePub {
		return false, ps
	}
	if !samePublicKey(pk, key.Public()) {
		return false, Problems{{pubPath, fmt.Sprintf("not the public half of %s: derive it: %s", privPath, derive)}}
	}
	return true, nil
}
