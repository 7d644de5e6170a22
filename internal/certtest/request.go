package certtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeRequest is a certificate request of node's kubelet as the kubelet
// makes it, with a new P-256 key: for its client certificate (signer
// kube-apiserver-client-kubelet) when ips is empty, else for its
// serving certificate (kubelet-serving) naming the node and ips.
func NodeRequest(node string, ips ...string) (*certificatesv1.CertificateSigningRequest, error) {
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}}}
	spec := certificatesv1.CertificateSigningRequestSpec{
		SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
		Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
	}
	if len(ips) > 0 {
		tmpl.DNSNames = []string{node}
		for _, ip := range ips {
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
		}
		spec.SignerName = certificatesv1.KubeletServingSignerName
		spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return nil, err
	}
	spec.Request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	return &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "node-csr-"}, Spec: spec}, nil
}
