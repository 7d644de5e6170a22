package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kiln-project/kiln/nodefile"
)

// WithShortLivedKubeletCert replaces, in node's rendered config, the
// client certificate of its kubelet kubeconfig with one from the same
// cluster CA (in pkiDir) that is valid from an hour ago for life more: a
// certificate already past the kubelet's renew deadline (70-90 % of its
// life), as after months of uptime. It returns the new config and the
// certificate's expiry. kiln gen itself would re-issue such a
// certificate, so the test edits the config it rendered.
func WithShortLivedKubeletCert(cfg []byte, pkiDir, node string, life time.Duration) ([]byte, time.Time, error) {
	const path = nodefile.KubeconfigDir + "/kubelet.conf"
	data, err := File(cfg, path)
	if err != nil {
		return nil, time.Time{}, err
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%s: %w", path, err)
	}
	certPEM, keyPEM, notAfter, err := shortLivedNodeCert(pkiDir, node, life)
	if err != nil {
		return nil, time.Time{}, err
	}
	for _, a := range kc.AuthInfos {
		a.ClientCertificateData, a.ClientKeyData = certPEM, keyPEM
	}
	if data, err = clientcmd.Write(*kc); err != nil {
		return nil, time.Time{}, err
	}
	out, err := replaceFile(cfg, path, data)
	return out, notAfter, err
}

func shortLivedNodeCert(pkiDir, node string, life time.Duration) (certPEM, keyPEM []byte, notAfter time.Time, err error) {
	ca, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, "ca.crt"), filepath.Join(pkiDir, "ca.key"))
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("the cluster CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	now := time.Now().Truncate(time.Second) // what a certificate holds
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()),
		Subject:      pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		NotBefore:    now.Add(-time.Hour), NotAfter: now.Add(life),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), tmpl.NotAfter, nil
}

// replaceFile sets the contents of the file at path in an Ignition config.
func replaceFile(cfg []byte, path string, data []byte) ([]byte, error) {
	var c map[string]any
	if err := json.Unmarshal(cfg, &c); err != nil {
		return nil, err
	}
	storage, _ := c["storage"].(map[string]any)
	files, _ := storage["files"].([]any)
	for _, f := range files {
		if m, ok := f.(map[string]any); ok && m["path"] == path {
			m["contents"] = map[string]any{"source": "data:;base64," + base64.StdEncoding.EncodeToString(data)}
			return json.Marshal(c)
		}
	}
	return nil, fmt.Errorf("the config has no %s", path)
}
