// Package certtest issues certificates the cluster's CA would not issue
// by itself, for tests: a node's kubelet client certificate with a
// lifetime of the test's choosing, to exercise its renewal, and a
// throwaway CA with a server certificate for a test's TLS server.
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
	"net"
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

// Serving is a throwaway CA and a server certificate it signs: what a
// test's TLS server presents and what its clients trust.
type Serving struct {
	CAPEM []byte          // the CA's certificate, PEM
	Cert  tls.Certificate // the server's chain and key
}

// NewServing makes a P-256 CA and a server certificate it signs for
// hosts (IP addresses or DNS names), both valid from an hour ago for 30
// days: longer than any test run, and clock skew of a VM is no matter.
func NewServing(hosts ...string) (*Serving, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	from := time.Now().Add(-time.Hour).Truncate(time.Second)
	to := from.Add(30 * 24 * time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kiln test CA"},
		NotBefore: from, NotAfter: to, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: from, NotAfter: to,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	return &Serving{
		CAPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		Cert:  tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key},
	}, nil
}

// Pool is a certificate pool holding the CA alone.
func (s *Serving) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.CAPEM)
	return pool
}
