package nodeops

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/contract/removednodes"
	"github.com/kiln-project/kiln/gen/pki"
)

// KubeletClientStem is a node's kubelet client certificate in the PKI,
// the credential admit lets back in.
func KubeletClientStem(node string) string { return pki.NodeStem(node, "kubelet-client") }

// Admitter lets a removed node back in with new credentials.
type Admitter struct {
	PKI  pki.Store
	Kube kubernetes.Interface
	Log  Logf
}

// Admit adds the credential ID of node's kubelet client certificate in
// the PKI to its removed-nodes entry, so that the admission policy lets
// that certificate (and, through the masters' anchor, those its kubelet
// renews it into) request certificates and write its Node again. It
// refuses a certificate issued before the removal: the machine, or
// anyone holding its old config, may still have it. A node that is not
// listed wraps removednodes.ErrNotRemoved, and nothing changes.
func (a *Admitter) Admit(ctx context.Context, node string) error {
	path := filepath.Join(a.PKI.Dir, filepath.FromSlash(KubeletClientStem(node))+".crt")
	data, err := a.PKI.Cert(KubeletClientStem(node))
	if err != nil {
		return fmt.Errorf("admit %s: the kubelet client certificate: %w", node, err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		return fmt.Errorf("admit %s: %s: no PEM certificate", node, path)
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return fmt.Errorf("admit %s: %s: %w", node, path, err)
	}
	id := removednodes.CredentialID(b.Bytes)
	issuedBefore := func(e removednodes.Entry) error { return issuedAfter(path, node, cert, e.Removed) }
	e, err := removednodes.Admit(ctx, a.Kube, node, id, issuedBefore)
	if err != nil {
		return fmt.Errorf("admit %s: %w", node, err)
	}
	a.Log("admitted %s's kubelet client certificate %s (%s, issued %s): ConfigMap %s/%s lists %s", node, path, id,
		issued(cert).Format(time.RFC3339), removednodes.Namespace, removednodes.Name, e)
	return nil
}

// issued is when the certificate was issued: kiln backdates NotBefore
// by five minutes for clock skew (pki.Store.Sign).
func issued(cert *x509.Certificate) time.Time { return cert.NotBefore.Add(5 * time.Minute).UTC() }

// issuedAfter refuses a certificate issued before the removal.
func issuedAfter(path, node string, cert *x509.Certificate, removed time.Time) error {
	if at := issued(cert); at.Before(removed) {
		return fmt.Errorf("%s: issued %s, before the removal at %s: run kiln pki renew --node %s and kiln gen first",
			path, at.Format(time.RFC3339), removed.UTC().Format(time.RFC3339), node)
	}
	return nil
}
