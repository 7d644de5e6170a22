// Package certtest issues certificates the cluster's CA would not issue
// by itself, for tests: a node's kubelet client certificate with a
// lifetime of the test's choosing, to exercise its renewal.
package certtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"path/filepath"
	"time"
)

// NodeClientCert issues node's kubelet client certificate (CN
// system:node:<node>, O system:nodes) from the Kubernetes CA in pkiDir
// (ca.crt, ca.key), valid from notBefore to notAfter, with a new P-256
// key. Times are truncated to the second, as a certificate holds them.
func NodeClientCert(pkiDir, node string, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, cert *x509.Certificate, err error) {
	ca, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, "ca.crt"), filepath.Join(pkiDir, "ca.key"))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("the cluster CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return nil, nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		NotBefore:    notBefore.Truncate(time.Second), NotAfter: notAfter.Truncate(time.Second),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return nil, nil, nil, err
	}
	if cert, err = x509.ParseCertificate(der); err != nil {
		return nil, nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), cert, nil
}
