package role

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kiln-project/kiln/internal/certtest"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/etcdmember"
	"github.com/kiln-project/kiln/node/servingcert"
)

// Against a real kube-apiserver, with the add-ons' RBAC: a DHCP node's
// kubelet (impersonated) asks for a serving certificate as the kubelet
// does, and the masters' anchor's account approves it for the address
// its Node reports and denies one asking for another node's; the same
// account may not approve a kubelet client certificate.
func TestServingCertApprovalOnARealAPIServer(t *testing.T) {
	cp := startRealControlPlane(t)
	ctx := context.Background()
	if err := cp.cluster.applyAddOns(ctx, cp.node.units().env.params(etcdmember.Membership{})); err != nil {
		t.Fatal(err)
	}
	admin := cp.cluster.kube
	// w7 also claims w8's address, as a node lying about its own may.
	for name, ips := range map[string][]string{"w7": {"10.9.0.7", "10.9.0.8"}, "w8": {"10.9.0.8"}} {
		n, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ip := range ips {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
		}
		if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	good := servingRequest(t, cp, "w7", "10.9.0.7")
	stolen := servingRequest(t, cp, "w7", "10.9.0.8")
	client := servingRequest(t, cp, "w7", "")

	anchor := impersonated(t, cp, "system:serviceaccount:kube-system:"+manifests.MastersAnchor)
	var log []string
	a := &servingcert.Approver{Kube: anchor, Site: func() (servingcert.Site, error) {
		return servingcert.Site{"m1": "10.9.0.1", "w7": "", "w8": ""}, nil
	}, Log: func(f string, args ...any) { log = append(log, f) }}
	// RBAC takes a moment to see the add-ons' binding.
	err := retry.Wait(ctx, "the masters' anchor answering the serving requests", time.Minute, t.Logf, func(ctx context.Context) error {
		return a.Reconcile(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]certificatesv1.RequestConditionType{good: certificatesv1.CertificateApproved, stolen: certificatesv1.CertificateDenied} {
		c, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(c.Status.Conditions, func(cond certificatesv1.CertificateSigningRequestCondition) bool { return cond.Type == want }) {
			t.Errorf("%s: conditions %v, want %s", name, c.Status.Conditions, want)
		}
		if want == certificatesv1.CertificateDenied && !strings.Contains(c.Status.Conditions[0].Message, "which Node w8 reports") {
			t.Errorf("%s denied with %q", name, c.Status.Conditions[0].Message)
		}
	}
	c, err := anchor.CertificatesV1().CertificateSigningRequests().Get(ctx, client, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "test"})
	if _, err := anchor.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, client, c, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the masters' anchor approving a kubelet client certificate: %v, want forbidden", err)
	}
}

// servingRequest creates, as node name's kubelet, a request for its
// serving certificate for ip (its client certificate when ip is ""), and
// returns its name.
func servingRequest(t *testing.T, cp *realControlPlane, name, ip string) string {
	t.Helper()
	var ips []string
	if ip != "" {
		ips = []string{ip}
	}
	csr, err := certtest.NodeRequest(name, ips...)
	if err != nil {
		t.Fatal(err)
	}
	kube := impersonated(t, cp, "system:node:"+name, "system:nodes", "system:authenticated")
	if csr, err = kube.CertificatesV1().CertificateSigningRequests().Create(context.Background(), csr, metav1.CreateOptions{}); err != nil {
		t.Fatalf("%s creating a request to %s: %v", name, csr.Spec.SignerName, err)
	}
	return csr.Name
}

// impersonated is a client acting as user in groups, through the
// agent's system:masters credential.
func impersonated(t *testing.T, cp *realControlPlane, user string, groups ...string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(cp.config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube
}
