package role

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/certificate"

	"github.com/kiln-project/kiln/builder/realbin"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/certtest"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// A kubelet whose client certificate is about to expire renews it: with
// the add-ons applied and the controller-manager running with the
// genesis node's flags, the node's certificate request, made with its
// current certificate, is approved by the controller-manager by itself
// and signed by the cluster CA. The renewing side is client-go's
// certificate manager, the code the kubelet runs when rotateCertificates
// is on, seeded as kiln seeds the kubelet: from its kubeconfig's
// certificate. Without the add-ons' rotation binding the request stays
// pending and the test fails.
func TestKubeletClientCertRotatesOnARealControlPlane(t *testing.T) {
	cp := startRealControlPlane(t)
	ctx := context.Background()
	if err := cp.cluster.applyAddOns(ctx, cp.node.units().env.params(etcdmember.Membership{})); err != nil {
		t.Fatal(err)
	}
	startControllerManager(t, cp)

	// Valid from an hour ago for 5 more minutes: past the kubelet's renew
	// deadline (70-90 % of its life), as after months of uptime.
	now := time.Now()
	certPEM, keyPEM, short, err := certtest.NodeClientCert(filepath.Join(cp.root, nodefile.PKIDir), "g1", now.Add(-time.Hour), now.Add(5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(cp.root, nodefile.PKIDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	host := fmt.Sprintf("https://127.0.0.1:%d", cp.apiPort)
	serverName := cp.serverName
	store, err := certificate.NewFileStore("kubelet-client", t.TempDir(), t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := certificate.NewManager(&certificate.Config{
		ClientsetFn: func(current *tls.Certificate) (kubernetes.Interface, error) {
			cert, key, err := pemPair(current)
			if err != nil {
				return nil, err
			}
			return kubernetes.NewForConfig(&rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{
				CAData: caPEM, ServerName: serverName, CertData: cert, KeyData: key}})
		},
		Template:                &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:g1", Organization: []string{"system:nodes"}}},
		SignerName:              certificatesv1.KubeAPIServerClientKubeletSignerName,
		GetUsages:               certificate.DefaultKubeletClientGetUsages,
		CertificateStore:        store,
		BootstrapCertificatePEM: certPEM,
		BootstrapKeyPEM:         keyPEM,
		Name:                    "kubelet-client",
	})
	if err != nil {
		t.Fatal(err)
	}
	mgr.Start()
	defer mgr.Stop()

	renewed := func(context.Context) error {
		cur := mgr.Current()
		if cur == nil || cur.Leaf == nil || !cur.Leaf.NotAfter.After(short.NotAfter.Add(time.Hour)) {
			return fmt.Errorf("the certificate in use still expires at %s", short.NotAfter.Format(time.TimeOnly))
		}
		return nil
	}
	if err := retry.Wait(ctx, "the node's client certificate renewed", 3*time.Minute, t.Logf, renewed); err != nil {
		csrs, _ := cp.cluster.kube.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		for _, c := range csrs.Items {
			t.Logf("CSR %s by %s: %v", c.Name, c.Spec.Username, c.Status.Conditions)
		}
		t.Fatal(err)
	}
	leaf := mgr.Current().Leaf
	if leaf.Subject.CommonName != "system:node:g1" || leaf.Issuer.CommonName != short.Issuer.CommonName {
		t.Errorf("renewed certificate: subject %s, issuer %s; want system:node:g1 from %s", leaf.Subject, leaf.Issuer, short.Issuer)
	}
	csrs, err := cp.cluster.kube.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	approved := false
	for _, c := range csrs.Items {
		for _, cond := range c.Status.Conditions {
			approved = approved || (c.Spec.Username == "system:node:g1" && cond.Type == certificatesv1.CertificateApproved && cond.Reason == "AutoApproved")
		}
	}
	if !approved {
		t.Error("no CSR of system:node:g1 was auto-approved")
	}
	t.Logf("renewed: expires %s (was %s)", leaf.NotAfter.Format(time.RFC3339), short.NotAfter.Format(time.RFC3339))
}

// startControllerManager runs kube-controller-manager with the node's
// static-pod flags, on the host, with the controllers that sign and
// approve certificate requests.
func startControllerManager(t *testing.T, cp *realControlPlane) {
	t.Helper()
	p := cp.node.units().env.params(etcdmember.Membership{})
	flags := manifests.ControllerManager(p).Spec.Containers[0].Command[1:]
	kc := localKubeconfig(t, cp.root, nodefile.KubeconfigDir+"/controller-manager.conf", cp.apiPort)
	args := hostArgs(cp.root, flags, map[string]string{
		"--kubeconfig": kc, "--authentication-kubeconfig": kc, "--authorization-kubeconfig": kc,
		"--controllers": "csrapproving,csrsigning", "--leader-elect": "false",
	})
	realbin.Start(t, "kube-controller-manager", cp.bins["kube-controller-manager"], append(args, fmt.Sprintf("--secure-port=%d", freePort(t)))...)
}

func pemPair(c *tls.Certificate) (cert, key []byte, err error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}
