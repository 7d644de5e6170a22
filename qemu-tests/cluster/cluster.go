// Package cluster is what the QEMU scenarios and kiln-bench share to make
// a site's configs and to reach its cluster from the host: a client
// through hostfwd on 127.0.0.1, or through a network namespace's bridge,
// with the admin kubeconfig; the checks themselves are clustercheck's.
package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/gen/nodeconfig"
	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/freeport"
)

// GenesisMAC is the genesis node's NIC: its static address is matched by it.
const GenesisMAC = "52:54:00:00:00:01"

// SiteName is the name of every test site's cluster.
const SiteName = "qemu"

// SiteHead is the start of every test site up to its node list: the
// cluster section, with extra (indented lines such as "  timing: slow\n")
// at its end.
func SiteHead(extra string) string {
	return `apiVersion: kiln.dev/v1alpha1
kind: Site
cluster:
  name: ` + SiteName + `
  kubernetesVersion: v1.37.1
  podCIDR: 10.244.0.0/16
  serviceCIDR: 10.96.0.0/12
` + extra + "nodes:\n"
}

// GenesisSite is a one-master cluster inside QEMU's user network (the
// genesis node at 10.0.2.50). With a second master, that master is at the
// host's address as the guest sees it (10.0.2.2).
func GenesisSite(withSecondMaster bool) string {
	return genesisSite("", withSecondMaster)
}

// GenesisSiteTimed is the one-master GenesisSite with the cluster's
// timing profile set (site.TimingDefault leaves the field out).
func GenesisSiteTimed(timing string) string {
	if timing == "" || timing == site.TimingDefault {
		return GenesisSite(false)
	}
	return genesisSite("  timing: "+timing+"\n", false)
}

func genesisSite(extra string, withSecondMaster bool) string {
	s := SiteHead(extra) + `  - {name: g1, role: genesis, macs: ["52:54:00:00:00:01"], installDisk: /dev/vda, network: {address: 10.0.2.50/24, gateway: 10.0.2.2}}
`
	if withSecondMaster {
		s += "  - {name: m2, role: master, macs: [\"52:54:00:00:00:02\"], installDisk: /dev/vda, network: {address: 10.0.2.2/24, gateway: 10.0.2.3}}\n"
	}
	return s
}

// HostGenesisSite is a two-master site whose genesis h1 is the host as
// QEMU's user network shows it (10.0.2.2, where a test runs a real etcd)
// and whose master m3 is the VM (10.0.2.50, GenesisMAC).
func HostGenesisSite() string {
	return SiteHead("") + `  - {name: h1, role: genesis, macs: ["52:54:00:00:00:02"], installDisk: /dev/vda, network: {address: 10.0.2.2/24, gateway: 10.0.2.3}}
  - {name: m3, role: master, macs: ["` + GenesisMAC + `"], installDisk: /dev/vda, network: {address: 10.0.2.50/24, gateway: 10.0.2.2}}
`
}

// Configs renders every node's Ignition config of a site with a fresh PKI
// in pkiDir.
func Configs(siteYAML, pkiDir string) (map[string][]byte, error) {
	s, err := site.Parse("qemu-site.yaml", []byte(siteYAML))
	if err != nil {
		return nil, err
	}
	st := pki.Store{Dir: pkiDir}
	if _, err := st.Ensure(s); err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, n := range s.Nodes {
		if out[n.Name], err = nodeconfig.Render(s, st, n); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// File reads one file's contents out of a rendered Ignition config.
func File(cfg []byte, path string) ([]byte, error) {
	var c struct {
		Storage struct {
			Files []struct {
				Path     string
				Contents struct{ Source string }
			}
		}
	}
	if err := json.Unmarshal(cfg, &c); err != nil {
		return nil, err
	}
	for _, f := range c.Storage.Files {
		if f.Path == path {
			return base64.StdEncoding.DecodeString(strings.TrimPrefix(f.Contents.Source, "data:;base64,"))
		}
	}
	return nil, fmt.Errorf("the config has no %s", path)
}

// HostClient reaches a VM's apiserver through hostfwd on 127.0.0.1:port
// with the master's agent kubeconfig of cfg (system:masters), checking the apiserver's certificate
// for the discovery name.
func HostClient(cfg []byte, port int) (kubernetes.Interface, error) {
	data, err := File(cfg, nodefile.AgentKubeconfig)
	if err != nil {
		return nil, err
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, err
	}
	for _, c := range kc.Clusters {
		c.TLSServerName, _, _ = net.SplitHostPort(strings.TrimPrefix(c.Server, "https://"))
		c.Server = fmt.Sprintf("https://127.0.0.1:%d", port)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*kc, nil).ClientConfig()
	if err != nil {
		return nil, err
	}
	rc.Timeout = 20 * time.Second
	return kubernetes.NewForConfig(rc)
}

// FreePort is a free TCP port on 127.0.0.1 for a hostfwd (freeport).
func FreePort() (int, error) { return freeport.Get() }

// KilnImage is the kiln image's reference, from an image's manifest.
func KilnImage(outDir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(outDir, "node.manifest.json"))
	if err != nil {
		return "", err
	}
	var m struct{ Images []struct{ Role, Ref string } }
	if err := json.Unmarshal(data, &m); err != nil {
		return "", err
	}
	for _, im := range m.Images {
		if im.Role == "kiln" {
			return im.Ref, nil
		}
	}
	return "", fmt.Errorf("%s lists no kiln image: the image was built without components", filepath.Join(outDir, "node.manifest.json"))
}

// AnonymousClient is an HTTPS client with no credentials that trusts the
// cluster CA of cfg: what an anonymous caller of the apiserver is. dial
// makes its connections.
func AnonymousClient(cfg []byte, dial Dialer) (*http.Client, error) {
	ca, err := File(cfg, nodefile.PKIDir+"/ca.crt")
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s/ca.crt: no certificate", nodefile.PKIDir)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, DialContext: dial}
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}, nil
}
