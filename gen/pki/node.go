package pki

import (
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

	"k8s.io/client-go/tools/clientcmd"
)

// NodePaths are where a node keeps certificates: PEM files (a directory
// is read whole, recursively) and kubeconfigs, whose client certificates
// are embedded or named.
type NodePaths struct {
	PEM         []string
	Kubeconfigs []string
}

// CheckNode lists the certificates a node holds under root (the node's
// "/"), sorted by where they were found, and reports each one that does
// not parse, has expired or expires within warn (0: its renew window).
// A path that does not exist is skipped: a worker has no etcd
// certificates, a kubelet that never rotated has no rotated certificate.
func CheckNode(root string, paths NodePaths, warn time.Duration, now time.Time) ([]Info, Problems) {
	var infos []Info
	var ps Problems
	found := func(where string, cert *x509.Certificate) {
		infos = append(infos, Info{Stem: where, Subject: cert.Subject.String(), Issuer: cert.Issuer.CommonName,
			IsCA: cert.IsCA, NotBefore: cert.NotBefore, NotAfter: cert.NotAfter})
		window := warn
		if window == 0 {
			window = RenewWindow(lifetime(cert))
		}
		if what := expiry(cert, now, window); what != "" {
			ps.add(Problem{Path: where, What: what})
		}
	}
	for _, p := range paths.PEM {
		for _, f := range pemFiles(filepath.Join(root, p), &ps) {
			data, err := os.ReadFile(f)
			if err != nil {
				ps.add(Problem{Path: nodePath(root, f), What: err.Error()})
				continue
			}
			certs, err := pemCerts(data)
			if err != nil {
				ps.add(Problem{Path: nodePath(root, f), What: err.Error()})
			}
			for _, c := range certs {
				found(nodePath(root, f), c)
			}
		}
	}
	for _, p := range paths.Kubeconfigs {
		matches, _ := filepath.Glob(filepath.Join(root, p))
		for _, f := range matches {
			certs, err := kubeconfigCerts(root, f)
			if err != nil {
				ps.add(Problem{Path: nodePath(root, f), What: err.Error()})
			}
			for user, c := range certs {
				found(nodePath(root, f)+" (user "+user+")", c)
			}
		}
	}
	slices.SortFunc(infos, func(a, b Info) int { return strings.Compare(a.Stem, b.Stem) })
	return infos, ps
}

func nodePath(root, f string) string {
	return "/" + strings.TrimPrefix(strings.TrimPrefix(f, root), "/")
}

// pemFiles is path itself when it is a file, else every .crt and .pem
// file under it, symbolic links to files included (the kubelet's
// kubelet-client-current.pem is one).
func pemFiles(path string, ps *Problems) []string {
	fi, err := os.Stat(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			ps.add(Problem{Path: path, What: err.Error()})
		}
		return nil
	}
	if !fi.IsDir() {
		return []string{path}
	}
	var out []string
	filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".crt") || strings.HasSuffix(p, ".pem")) {
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				out = append(out, p)
			}
		}
		return nil
	})
	return out
}

// pemCerts returns every certificate of a PEM file, skipping its other
// blocks (the kubelet keeps its key in the same file).
func pemCerts(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return certs, fmt.Errorf("not a certificate: %w", err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate in it")
	}
	return certs, nil
}

// kubeconfigCerts are a kubeconfig's client certificates by user.
func kubeconfigCerts(root, path string) (map[string]*x509.Certificate, error) {
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("not a kubeconfig: %w", err)
	}
	out := map[string]*x509.Certificate{}
	for user, a := range kc.AuthInfos {
		data := a.ClientCertificateData
		if len(data) == 0 && a.ClientCertificate != "" {
			if data, err = os.ReadFile(filepath.Join(root, a.ClientCertificate)); err != nil {
				return out, fmt.Errorf("user %s: %w", user, err)
			}
		}
		if len(data) == 0 {
			continue // a token, or no credential
		}
		c, err := parseCert(data)
		if err != nil {
			return out, fmt.Errorf("user %s: %w", user, err)
		}
		out[user] = c
	}
	return out, nil
}
