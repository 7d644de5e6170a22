package kubeletclient

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// TestClientPresentsTheCertificateTheKubeletHolds runs a real TLS
// handshake against a server that records the client certificate: the
// kubelet's stored certificate when there is one, else the kubeconfig's.
func TestClientPresentsTheCertificateTheKubeletHolds(t *testing.T) {
	var presented string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		presented = r.TLS.PeerCertificates[0].Subject.CommonName
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"m1"}}`))
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	defer srv.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	for _, tc := range []struct {
		name    string
		current string // what Current holds: "" none, "dangling" a link to nothing, else a CN
		want    string
	}{
		{name: "no renewed certificate yet", want: "from-kubeconfig"},
		{name: "a renewed certificate", current: "renewed", want: "renewed"},
		{name: "a link to a pair the kubelet removed", current: "dangling", want: "from-kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			certPEM, keyPEM := selfSigned(t, "from-kubeconfig")
			writeKubeconfig(t, root, srv.URL, caPEM, certPEM, keyPEM)
			current := filepath.Join(root, Current)
			if err := os.MkdirAll(filepath.Dir(current), 0o755); err != nil {
				t.Fatal(err)
			}
			switch tc.current {
			case "":
			case "dangling":
				if err := os.Symlink("kubelet-client-2026-01-01.pem", current); err != nil {
					t.Fatal(err)
				}
			default:
				c, k := selfSigned(t, tc.current)
				if err := os.WriteFile(current, append(c, k...), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			kube, err := New(root)
			if err != nil {
				t.Fatal(err)
			}
			presented = ""
			if _, err := kube.CoreV1().Nodes().Get(t.Context(), "m1", metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
			if presented != tc.want {
				t.Errorf("the client presented %q, want %q", presented, tc.want)
			}
		})
	}
}

func TestConfigNamesTheMissingKubeconfig(t *testing.T) {
	_, err := Config(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), Kubeconfig) {
		t.Errorf("Config without a kubeconfig: %v, want an error naming %s", err, Kubeconfig)
	}
}

func writeKubeconfig(t *testing.T, root, server string, caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	kc.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "x"
	path := filepath.Join(root, Kubeconfig)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
}

func selfSigned(t *testing.T, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}
