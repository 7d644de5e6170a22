package cluster

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/certtest"
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
	now := time.Now()
	certPEM, keyPEM, cert, err := certtest.NodeClientCert(pkiDir, node, now.Add(-time.Hour), now.Add(life))
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
	return out, cert.NotAfter, err
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
