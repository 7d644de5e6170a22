package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func selfSigned(t *testing.T, cn string, notBefore, notAfter time.Time) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: notBefore, NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func put(t *testing.T, root, path string, data []byte) {
	t.Helper()
	full := filepath.Join(root, path)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCheckNodeListsEveryCertificateAndFlagsExpiry(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	year := 365 * 24 * time.Hour
	root := t.TempDir()
	put(t, root, "/etc/kiln/pki/ca.crt", selfSigned(t, "kiln-ca", now.Add(-year), now.Add(9*year)))
	put(t, root, "/etc/kiln/pki/ca.key", []byte("not read"))
	put(t, root, "/etc/kiln/pki/etcd/peer.crt", selfSigned(t, "old-peer", now.Add(-2*year), now.Add(-time.Hour)))
	put(t, root, "/etc/kiln/pki/broken.crt", []byte("garbage"))
	embedded := selfSigned(t, "system:node:m1", now.Add(-year), now.Add(10*24*time.Hour))
	put(t, root, "/etc/kiln/kubeconfig/kubelet.conf", []byte(`apiVersion: v1
kind: Config
users:
- name: kubelet
  user:
    client-certificate-data: `+b64(embedded)+`
- name: token-only
  user:
    token: abc
`))
	rotated := append(selfSigned(t, "system:node:m1", now.Add(-time.Hour), now.Add(year)), []byte("-----BEGIN EC PRIVATE KEY-----\nAA==\n-----END EC PRIVATE KEY-----\n")...)
	put(t, root, "/var/lib/kubelet/pki/kubelet-client-2026-11-25.pem", rotated)
	if err := os.Symlink("kubelet-client-2026-11-25.pem", filepath.Join(root, "/var/lib/kubelet/pki/kubelet-client-current.pem")); err != nil {
		t.Fatal(err)
	}

	infos, ps := CheckNode(root, NodePaths{
		PEM:         []string{"/etc/kiln/pki", "/var/lib/kubelet/pki/kubelet-client-current.pem", "/etc/kiln/absent"},
		Kubeconfigs: []string{"/etc/kiln/kubeconfig/*.conf"},
	}, 0, now)

	var listed []string
	for _, i := range infos {
		listed = append(listed, i.Stem+"="+strings.TrimPrefix(i.Subject, "CN="))
	}
	want := []string{
		"/etc/kiln/kubeconfig/kubelet.conf (user kubelet)=system:node:m1",
		"/etc/kiln/pki/ca.crt=kiln-ca",
		"/etc/kiln/pki/etcd/peer.crt=old-peer",
		"/var/lib/kubelet/pki/kubelet-client-current.pem=system:node:m1",
	}
	if strings.Join(listed, "\n") != strings.Join(want, "\n") {
		t.Errorf("listed:\n%s\nwant:\n%s", strings.Join(listed, "\n"), strings.Join(want, "\n"))
	}
	var got []string
	for _, p := range ps {
		got = append(got, p.Error())
	}
	for _, w := range []string{
		"/etc/kiln/pki/etcd/peer.crt: expired on",
		"/etc/kiln/kubeconfig/kubelet.conf (user kubelet): expires on",
		"broken.crt: no PEM certificate in it",
	} {
		if !strings.Contains(strings.Join(got, "\n"), w) {
			t.Errorf("problems do not say %q:\n%s", w, strings.Join(got, "\n"))
		}
	}
	if len(got) != 3 {
		t.Errorf("%d problems, want 3:\n%s", len(got), strings.Join(got, "\n"))
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
