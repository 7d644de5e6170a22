package qemutests

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/clustercheck"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

// TestGenesisBootsAndSurvivesPowerCut: the default ISO with a genesis
// config from kiln gen becomes a one-node cluster that the host reaches
// through hostfwd (the apiserver, and etcd for the encryption check),
// hardened as issue 13 asks; after a ConfigMap is written the VM loses power and
// boots again with no config, and the cluster comes back by itself. It
// runs in make test while the three-node scenario (KILN_CLUSTER=1) is
// left to make cluster-test and make soak.
func TestGenesisBootsAndSurvivesPowerCut(t *testing.T) {
	out := outDir(t)
	dir := logDir(t, out)
	image, err := cluster.KilnImage(out)
	if err != nil {
		t.Fatal(err)
	}
	pkiDir := filepath.Join(t.TempDir(), "pki")
	cfgs, err := cluster.Configs(cluster.GenesisSite(false), pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet starts with a client certificate past its renew
	// deadline: it must renew it through the cluster (issue 13 §5).
	g1, shortCertEnd, err := cluster.WithShortLivedKubeletCert(cfgs["g1"], pkiDir, "g1", 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	cfgs["g1"] = withCPUReport(t, withDockerProbe(t, g1, image))
	disk := filepath.Join(dir, "state.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", disk, "8G")
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	etcdPort, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	v := startVM(t, vm.Config{Name: "genesis", Dir: dir, Firmware: vm.BIOS, Boot: vm.BootISO, MemoryMiB: 3072, CPUs: 2, MAC: cluster.GenesisMAC,
		ISO: filepath.Join(out, "node.iso"), Disks: []vm.Disk{{Path: disk, Format: "qcow2"}},
		HostFwd:  []string{fmt.Sprintf("tcp:127.0.0.1:%d-10.0.2.50:6443", port), fmt.Sprintf("tcp:127.0.0.1:%d-10.0.2.50:2379", etcdPort)},
		Ignition: cfgs["g1"]})
	ctx := context.Background()
	tl := newBootTimeline(t, dir, "genesis scenario")
	line, err := cluster.WaitRoleDone(ctx, v, "genesis", "bootstrapped", joinBoot)
	tl.add(bootName("g1", 1), v)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("boot 1: %s (%s after power-on)", line, v.Uptime().Round(time.Second))
	expectFields(t, waitLine(t, v, `probe: docker=`), map[string]string{"docker": "ok"})
	kube, err := cluster.HostClient(cfgs["g1"], port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the cluster when the test failed:\n%s", clustercheck.Describe(context.Background(), kube))
		}
	})
	checkOneNode(t, kube, image, time.Time{})
	checkHardening(t, kube, cfgs["g1"], port, etcdPort)
	checkClientCertRenewed(t, kube, "g1", shortCertEnd)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "survives-power-cut"}, Data: map[string]string{"written": time.Now().UTC().Format(time.RFC3339Nano)}}
	if _, err := kube.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	v.PowerCut()
	v.Ignition = nil
	restart := time.Now().Add(-5 * time.Second) // the guest clock starts from the host's RTC
	if err := v.Restart(); err != nil {
		t.Fatal(err)
	}
	line, err = cluster.WaitRoleDone(ctx, v, "genesis", "restored", joinBoot)
	tl.add(bootName("g1", 2), v)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("boot 2: %s (%s after power-on)", line, v.Uptime().Round(time.Second))
	if src, ok := v.Find(mustRe(`kiln-firstboot: done source=`)); !ok || !strings.Contains(src, "source=state") {
		t.Errorf("boot 2 config source: %q, want the state partition", src)
	}
	got, err := kube.CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{})
	if err != nil || got.Data["written"] != cm.Data["written"] {
		t.Fatalf("the ConfigMap after the power cut: %v %v", got, err)
	}
	checkOneNode(t, kube, image, restart)
}

// checkOneNode: the node Ready from a heartbeat since, its 13 kube-system
// pods running, a pod resolving the kubernetes service through cluster DNS.
func checkOneNode(t *testing.T, kube kubernetes.Interface, image string, since time.Time) {
	t.Helper()
	ctx := context.Background()
	eventually(t, "node g1 Ready", clusterSettle, func() error { return clustercheck.NodeReady(ctx, kube, "g1", since) })
	eventually(t, "every kube-system pod running", clusterSettle, func() error { return clustercheck.KubeSystemRunning(ctx, kube, 13, since) })
	pod := clustercheck.CheckPod("dns-check", image, "", "dns", "--retry", "120s", serviceName)
	if _, logs := runCheckPod(t, kube, pod); !strings.Contains(logs, "resolved "+serviceName+": [10.96.0.1]") {
		t.Fatalf("cluster DNS: %q", logs)
	}
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
