package cluster

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/ignition"
)

func TestShortLivedKubeletCertChainsToTheClusterCA(t *testing.T) {
	pkiDir := filepath.Join(t.TempDir(), "pki")
	cfgs, err := Configs(GenesisSite(false), pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, end, err := WithShortLivedKubeletCert(cfgs["g1"], pkiDir, "g1", 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ignition.Parse(cfg); err != nil {
		t.Fatalf("the edited config does not validate: %v", err)
	}
	data, err := File(cfg, nodefile.KubeconfigDir+"/kubelet.conf")
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(pkiDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	for user, a := range kc.AuthInfos {
		b, _ := pem.Decode(a.ClientCertificateData)
		if b == nil {
			t.Fatalf("user %s: no certificate", user)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if !c.NotAfter.Equal(end) || c.Subject.CommonName != "system:node:g1" {
			t.Errorf("user %s: %s until %s, want system:node:g1 until %s", user, c.Subject, c.NotAfter, end)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("user %s: %v", user, err)
		}
	}
}
