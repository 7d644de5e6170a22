package qemutests

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
)

// checkHardening: an anonymous request to the apiserver at base reaches
// /readyz and nothing else, and a Secret written through the apiserver is
// encrypted in etcd, read raw at etcdURL with the apiserver's etcd client
// certificate; dial makes every connection. A wrong answer fails at once;
// a request that times out on a starved guest is asked again, within the
// 10 min the scenario's pods and creates get (a warm make test saw m1's
// apiserver give no answer for more than 3 min after the joins).
func checkHardening(t *testing.T, kube kubernetes.Interface, cfg []byte, base, etcdURL string, dial cluster.Dialer) {
	t.Helper()
	ctx := context.Background()
	anon, err := cluster.AnonymousClient(cfg, dial)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "anonymous access to "+base+" limited to /readyz", 10*time.Minute, func() error {
		return clustercheck.AnonymousLimited(ctx, anon, base)
	})
	plain := fmt.Sprintf("kiln-plaintext-%d", time.Now().UnixNano())
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "encrypted-at-rest"}, StringData: map[string]string{"value": plain}}
	createEventually(t, "the Secret "+secret.Name, func() error {
		_, err := kube.CoreV1().Secrets("default").Create(ctx, secret, metav1.CreateOptions{})
		return err
	})
	eventually(t, "the Secret read raw from etcd and encrypted", 10*time.Minute, func() error {
		raw, err := cluster.EtcdValue(ctx, cfg, etcdURL, "/registry/secrets/default/"+secret.Name, dial)
		if err != nil {
			return err
		}
		if err := clustercheck.EncryptedAtRest(raw, plain); err != nil {
			return retry.Final(err)
		}
		return nil
	})
}

// checkClientCertRenewed: node's kubelet asked for a new client
// certificate with its own, the controller-manager approved the request
// by itself and issued a certificate that outlives the old one.
func checkClientCertRenewed(t *testing.T, kube kubernetes.Interface, node string, oldEnd time.Time) {
	t.Helper()
	ctx := context.Background()
	eventually(t, "node "+node+"'s kubelet client certificate renewed", 10*time.Minute, func() error {
		csrs, err := kube.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var seen []string
		for _, c := range csrs.Items {
			if c.Spec.Username != "system:node:"+node || c.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
				continue
			}
			approved := slices.ContainsFunc(c.Status.Conditions, func(cond certificatesv1.CertificateSigningRequestCondition) bool {
				return cond.Type == certificatesv1.CertificateApproved && cond.Reason == "AutoApproved"
			})
			seen = append(seen, fmt.Sprintf("%s approved=%t issued=%t", c.Name, approved, len(c.Status.Certificate) > 0))
			if !approved || len(c.Status.Certificate) == 0 {
				continue
			}
			b, _ := pem.Decode(c.Status.Certificate)
			if b == nil {
				return fmt.Errorf("CSR %s: the issued certificate is not PEM", c.Name)
			}
			cert, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return fmt.Errorf("CSR %s: %w", c.Name, err)
			}
			if cert.Subject.CommonName != "system:node:"+node || !cert.NotAfter.After(oldEnd.Add(time.Hour)) {
				return fmt.Errorf("CSR %s issued %s until %s, want system:node:%s past %s", c.Name, cert.Subject, cert.NotAfter, node, oldEnd)
			}
			t.Logf("kubelet client certificate renewed through CSR %s: now valid until %s (was %s)", c.Name, cert.NotAfter.Format(time.RFC3339), oldEnd.Format(time.RFC3339))
			return nil
		}
		return fmt.Errorf("no approved and issued CSR of system:node:%s yet (%v)", node, seen)
	})
}

// checkRoleDoneAfterCertEnd: on a boot after the certificate node's
// config carried has expired (oldEnd), the agent still publishes the end
// of its role as the node's kubelet, which needs the certificate the
// kubelet renewed (kubeletclient). Before oldEnd it proves less, and says
// so.
func checkRoleDoneAfterCertEnd(t *testing.T, kube kubernetes.Interface, node string, oldEnd time.Time) {
	t.Helper()
	ctx := context.Background()
	eventually(t, "node "+node+"'s role done on this boot published", 3*time.Minute, func() error {
		obj, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return roleDoneOnItsBoot(obj)
	})
	if past := time.Since(oldEnd); past > 0 {
		t.Logf("node %s published its role's end %s after its config's kubelet certificate expired", node, past.Round(time.Second))
	} else {
		t.Logf("node %s published its role's end %s before its config's kubelet certificate expires: the renewed certificate is not proven on this run", node, (-past).Round(time.Second))
	}
}

// checkKubeletServingVerified: node (a DHCP node, whose serving
// certificate kiln gen cannot issue) serves its kubelet at ip with a
// certificate the cluster CA signed for that address, which the masters'
// anchor approved: what the apiserver checks (--kubelet-certificate-authority)
// before it reads logs there or runs exec.
func checkKubeletServingVerified(t *testing.T, kube kubernetes.Interface, dial cluster.Dialer, caFile, node, ip string) {
	t.Helper()
	ctx := context.Background()
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		t.Fatalf("%s: no certificate", caFile)
	}
	eventually(t, "node "+node+"'s kubelet serving a certificate the cluster CA signed for "+ip, 10*time.Minute, func() error {
		raw, err := dial(ctx, "tcp", net.JoinHostPort(ip, "10250"))
		if err != nil {
			return err
		}
		conn := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: ip})
		defer conn.Close()
		if err := conn.HandshakeContext(ctx); err != nil {
			return err
		}
		cert := conn.ConnectionState().PeerCertificates[0]
		if cert.Subject.CommonName != "system:node:"+node {
			return retry.Final(fmt.Errorf("%s:10250 serves %s", ip, cert.Subject))
		}
		t.Logf("%s's kubelet serves %s for %v, valid until %s", node, cert.Subject, cert.IPAddresses, cert.NotAfter.Format(time.RFC3339))
		return nil
	})
	csrs, err := kube.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range csrs.Items {
		if c.Spec.Username == "system:node:"+node && c.Spec.SignerName == certificatesv1.KubeletServingSignerName {
			for _, cond := range c.Status.Conditions {
				t.Logf("serving certificate request %s: %s (%s) %s", c.Name, cond.Type, cond.Reason, cond.Message)
			}
		}
	}
}
