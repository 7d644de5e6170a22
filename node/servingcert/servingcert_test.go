package servingcert

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

var site = Site{"m1": "10.77.0.11", "w1": "", "w2": ""}

func node(name string, ips ...string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, ip := range ips {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: name})
	return n
}

var nodes = []corev1.Node{node("m1", "10.77.0.11"), node("w1", "10.77.0.21"), node("w2", "10.77.0.22")}

// request is a kubelet's serving request as the kubelet makes it, with
// edit applied to its template and spec.
func request(t *testing.T, user string, edit func(*x509.CertificateRequest, *certificatesv1.CertificateSigningRequestSpec)) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	name, _ := strings.CutPrefix(user, "system:node:")
	tmpl := &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: user, Organization: []string{"system:nodes"}},
		DNSNames: []string{name},
	}
	spec := certificatesv1.CertificateSigningRequestSpec{
		SignerName: certificatesv1.KubeletServingSignerName, Username: user,
		Groups: []string{"system:nodes", "system:authenticated"},
		Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
	}
	if addr, ok := map[string]string{"m1": "10.77.0.11", "w1": "10.77.0.21", "w2": "10.77.0.22", "w9": "10.77.0.29"}[name]; ok {
		tmpl.IPAddresses = []net.IP{net.ParseIP(addr)}
	}
	if edit != nil {
		edit(tmpl, &spec)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Request == nil {
		spec.Request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}
	return &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "csr-" + name}, Spec: spec}
}

func TestCheck(t *testing.T) {
	ips := func(s ...string) func(*x509.CertificateRequest, *certificatesv1.CertificateSigningRequestSpec) {
		return func(r *x509.CertificateRequest, _ *certificatesv1.CertificateSigningRequestSpec) {
			r.IPAddresses = nil
			for _, a := range s {
				r.IPAddresses = append(r.IPAddresses, net.ParseIP(a))
			}
		}
	}
	for _, tc := range []struct {
		name  string
		user  string
		edit  func(*x509.CertificateRequest, *certificatesv1.CertificateSigningRequestSpec)
		nodes []corev1.Node
		want  string // "" approved; "wait: ..." pending
	}{
		{name: "a DHCP node for the address its Node reports", user: "system:node:w1"},
		{name: "a static node for its site address", user: "system:node:m1"},
		{name: "a static node for another address", user: "system:node:m1", edit: ips("10.77.0.99"), want: "asks for 10.77.0.99; the site gives m1 10.77.0.11"},
		{name: "a node not in the site", user: "system:node:w9", want: "node w9 is not in the site"},
		{name: "not a node", user: "system:serviceaccount:kube-system:x", want: "not by a node"},
		{name: "a node's name without its group", user: "system:node:w1", edit: func(_ *x509.CertificateRequest, s *certificatesv1.CertificateSigningRequestSpec) {
			s.Groups = []string{"system:authenticated"}
		}, want: "not by a node"},
		{name: "for another node's name", user: "system:node:w1", edit: func(r *x509.CertificateRequest, _ *certificatesv1.CertificateSigningRequestSpec) {
			r.Subject.CommonName = "system:node:w2"
		}, want: `subject "CN=system:node:w2,O=system:nodes"`},
		{name: "an extra DNS name", user: "system:node:w1", edit: func(r *x509.CertificateRequest, _ *certificatesv1.CertificateSigningRequestSpec) {
			r.DNSNames = append(r.DNSNames, "kube-apiserver.kiln.internal")
		}, want: `asks for the name "kube-apiserver.kiln.internal"`},
		{name: "client auth", user: "system:node:w1", edit: func(_ *x509.CertificateRequest, s *certificatesv1.CertificateSigningRequestSpec) {
			s.Usages = append(s.Usages, certificatesv1.UsageClientAuth)
		}, want: `usage "client auth"`},
		{name: "no address", user: "system:node:w1", edit: ips(), want: "names no address"},
		{name: "an address its Node does not report", user: "system:node:w1", edit: ips("10.77.0.50"), want: "asks for 10.77.0.50, which Node w1 does not report"},
		{name: "two addresses its Node reports", user: "system:node:w1", edit: ips("10.77.0.21", "10.77.0.51"),
			nodes: []corev1.Node{node("w1", "10.77.0.21", "10.77.0.51")}, want: "asks for 2 IPv4 and 0 IPv6 addresses"},
		{name: "an address of each family", user: "system:node:w1", edit: ips("10.77.0.21", "fd00::21"),
			nodes: []corev1.Node{node("w1", "10.77.0.21", "fd00::21")}},
		{name: "a master's site address, reported by the DHCP node too", user: "system:node:w1", edit: ips("10.77.0.11"),
			nodes: []corev1.Node{node("m1", "10.77.0.11"), node("w1", "10.77.0.21", "10.77.0.11")}, want: "the site's address of m1"},
		{name: "another DHCP node's address, reported by both", user: "system:node:w1", edit: ips("10.77.0.22"),
			nodes: []corev1.Node{node("w1", "10.77.0.22"), node("w2", "10.77.0.22")}, want: "which Node w2 reports"},
		{name: "a garbled request", user: "system:node:w1", edit: func(_ *x509.CertificateRequest, s *certificatesv1.CertificateSigningRequestSpec) {
			s.Request = []byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n")
		}, want: "does not parse"},
		{name: "a DHCP node not registered yet", user: "system:node:w1", nodes: []corev1.Node{node("m1", "10.77.0.11")}, want: "wait: Node w1 is not registered yet"},
		{name: "a DHCP node with no address yet", user: "system:node:w1", nodes: []corev1.Node{node("w1")}, want: "wait: Node w1 reports no address yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := tc.nodes
			if ns == nil {
				ns = nodes
			}
			why, err := Check(request(t, tc.user, tc.edit), site, ns)
			var p *Pending
			got := why
			if errors.As(err, &p) {
				got = "wait: " + p.Why
			} else if err != nil {
				t.Fatal(err)
			}
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// Reconcile approves a good request, denies a bad one with the reason,
// leaves one whose Node is not there yet, and ignores other signers and
// answered requests.
func TestReconcile(t *testing.T) {
	good := request(t, "system:node:w1", nil)
	bad := request(t, "system:node:w9", nil)
	early := request(t, "system:node:w2", nil)
	client := request(t, "system:node:w1", func(_ *x509.CertificateRequest, s *certificatesv1.CertificateSigningRequestSpec) {
		s.SignerName = certificatesv1.KubeAPIServerClientKubeletSignerName
	})
	client.Name = "csr-client"
	done := request(t, "system:node:m1", nil)
	done.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue}}
	m1, w1 := node("m1", "10.77.0.11"), node("w1", "10.77.0.21")
	kube := fake.NewClientset(good, bad, early, client, done, &m1, &w1)
	var log []string
	a := &Approver{Kube: kube, Site: func() (Site, error) { return site, nil }, Log: func(f string, args ...any) {
		log = append(log, strings.TrimSpace(strings.ReplaceAll(f, "%", "")))
	}}
	if err := a.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"csr-w1": string(certificatesv1.CertificateApproved), "csr-w9": string(certificatesv1.CertificateDenied),
		"csr-w2": "", "csr-client": "", "csr-m1": string(certificatesv1.CertificateDenied),
	}
	for name, cond := range want {
		c, err := kube.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got string
		if n := len(c.Status.Conditions); n > 0 {
			got = string(c.Status.Conditions[n-1].Type)
		}
		if got != cond || (name != "csr-m1" && len(c.Status.Conditions) > 1) {
			t.Errorf("%s: conditions %v, want last %q", name, c.Status.Conditions, cond)
		}
		if name == "csr-w9" && !strings.Contains(c.Status.Conditions[0].Message, "node w9 is not in the site") {
			t.Errorf("csr-w9 denied with %q", c.Status.Conditions[0].Message)
		}
	}
	if len(log) != 3 {
		t.Errorf("log %q: want an approval, a denial and a wait", log)
	}
}
