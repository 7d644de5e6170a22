package qemutests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kiln-project/kiln/internal/certtest"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
	"github.com/kiln-project/kiln/qemu-tests/netns"
)

// nodeCredential is a node's kubelet client certificate and key, as
// kiln gen issued them into the PKI directory.
type nodeCredential struct {
	name      string
	cert, key []byte
}

func readCredential(t *testing.T, pkiDir, name string) nodeCredential {
	t.Helper()
	dir := filepath.Join(pkiDir, "nodes", name)
	cert, err := os.ReadFile(filepath.Join(dir, "kubelet-client.crt"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join(dir, "kubelet-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	return nodeCredential{name, cert, key}
}

// readmit re-admits a removed node with new credentials
// (cluster.Readmit) into cfgs, once its old kubelet credential is
// refused; it returns that credential, so the caller can check it stays
// refused once the node is back.
func readmit(t *testing.T, tp cluster.Topology, seg *netns.Net, cfgs map[string][]byte, pkiDir, name string) nodeCredential {
	t.Helper()
	old := readCredential(t, pkiDir, name)
	checkCredentialRefused(t, tp, seg, pkiDir, old, "after kiln node remove")
	cfg, log, err := cluster.Readmit(kilnBinary(t), writeSite(t, tp), pkiDir, name, func(name string, args ...string) ([]byte, error) {
		return seg.Command(context.Background(), name, args...).CombinedOutput()
	})
	t.Log(log)
	if err != nil {
		t.Fatal(err)
	}
	cfgs[name] = withCPUReport(t, cfg)
	return old
}

// checkCredentialRefused: a certificate request made with the removed
// node's old kubelet credential (a dry run: nothing is stored either
// way) is refused by the removed-nodes policy, at the first master.
func checkCredentialRefused(t *testing.T, tp cluster.Topology, seg *netns.Net, pkiDir string, c nodeCredential, when string) {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(pkiDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(&rest.Config{
		Host: "https://" + tp.Machines[0].IP() + ":6443", Dial: seg.DialContext, Timeout: 30 * time.Second,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca, CertData: c.cert, KeyData: c.key},
	})
	if err != nil {
		t.Fatal(err)
	}
	name := c.name
	eventually(t, name+"'s old kubelet credential refused "+when, 5*time.Minute, func() error {
		csr, err := certtest.NodeRequest(name)
		if err != nil {
			t.Fatal(err)
		}
		_, err = kube.CertificatesV1().CertificateSigningRequests().Create(context.Background(), csr,
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err == nil:
			return fmt.Errorf("a certificate request with %s's old credential was accepted", name)
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), name+manifests.RemovedNodesDenial):
			t.Logf("%s's old credential %s: %v", name, when, err)
			return nil
		default:
			return err
		}
	})
}
