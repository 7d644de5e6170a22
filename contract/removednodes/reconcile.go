package removednodes

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// KubeletClientSigner signs the kubelets' client certificates.
const KubeletClientSigner = certificatesv1.KubeAPIServerClientKubeletSignerName

// nodeUser is the user name prefix of a node's credentials.
const nodeUser = "system:node:"

// Reconciler keeps an admitted node's credentials admitted across its
// kubelet's certificate rotation: each pass, every certificate issued to
// a listed node's kubelet on a request made with a credential its entry
// admits is admitted too. Without it, the rotated certificate would be
// refused at its next renewal and on every Node update. It only updates
// the list, never creates it: kiln node remove does.
type Reconciler struct {
	Kube kubernetes.Interface
	Log  func(string, ...any)
}

// Reconcile makes one pass; a CSR it cannot read is named in the error
// and the others are still done.
func (r *Reconciler) Reconcile(ctx context.Context) error {
	cms := r.Kube.CoreV1().ConfigMaps(Namespace)
	cm, err := cms.Get(ctx, Name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil // nothing removed
		}
		return fmt.Errorf("reading ConfigMap %s/%s: %w", Namespace, Name, err)
	}
	list, err := parse(cm)
	if err != nil || len(list) == 0 {
		return err
	}
	csrs, err := r.Kube.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{FieldSelector: "spec.signerName=" + KubeletClientSigner})
	if err != nil {
		return fmt.Errorf("listing certificate signing requests: %w", err)
	}
	var errs []error
	changed := map[string]bool{}
	// A rotated certificate rotates in turn: pass over the requests until
	// one admits nothing new, whatever order they are listed in.
	for pass, more := 0, true; more; pass++ {
		more = false
		for _, csr := range csrs.Items {
			node, id, err := lineage(csr, list)
			if err != nil {
				if pass == 0 { // named once
					errs = append(errs, err)
				}
				continue
			}
			if node == "" || list[node].Admits(id) {
				continue
			}
			e := list[node]
			e.Credentials = append(e.Credentials, id)
			list[node], changed[node], more = e, true, true
			r.Log("removed nodes: %s's certificate from request %s is admitted (%s)", node, csr.Name, id)
		}
	}
	if len(changed) == 0 {
		return errors.Join(errs...)
	}
	for node := range changed {
		cm.Data[node] = list[node].String()
	}
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		errs = append(errs, fmt.Errorf("updating ConfigMap %s/%s: %w", Namespace, Name, err))
	}
	return errors.Join(errs...)
}

// lineage is the listed node a request's issued certificate belongs to
// and that certificate's ID, when the request was made with a credential
// the node's entry admits; "" when the request is none of that.
func lineage(csr certificatesv1.CertificateSigningRequest, list List) (node, id string, err error) {
	if csr.Spec.SignerName != KubeletClientSigner || len(csr.Status.Certificate) == 0 || !strings.HasPrefix(csr.Spec.Username, nodeUser) {
		return "", "", nil
	}
	node = strings.TrimPrefix(csr.Spec.Username, nodeUser)
	e, ok := list[node]
	if !ok {
		return "", "", nil
	}
	admitted := false
	for _, by := range csr.Spec.Extra[CredentialIDKey] {
		admitted = admitted || e.Admits(by)
	}
	if !admitted {
		return "", "", nil
	}
	b, _ := pem.Decode(csr.Status.Certificate)
	if b == nil {
		return "", "", fmt.Errorf("request %s: status.certificate holds no PEM certificate", csr.Name)
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return "", "", fmt.Errorf("request %s: status.certificate: %w", csr.Name, err)
	}
	if cert.Subject.CommonName != csr.Spec.Username {
		return "", "", fmt.Errorf("request %s by %s: issued certificate names %q", csr.Name, csr.Spec.Username, cert.Subject.CommonName)
	}
	return node, CredentialID(b.Bytes), nil
}

// Run reconciles every interval until ctx ends, logging a failed pass.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) {
	for {
		if err := r.Reconcile(ctx); err != nil {
			r.Log("removed nodes: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
