package qemutests

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/gobuild"
	"github.com/kiln-project/kiln/images"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

const (
	genesisDone  = `kiln-firstboot: done role=genesis`
	genesisEnded = genesisDone + `|kiln-firstboot: error`
	// genesisBoot bounds a genesis boot under TCG: image import, etcd,
	// the control plane, add-ons and the validation pod.
	genesisBoot = 30 * time.Minute
	// kubeSystemPods: etcd, apiserver, controller-manager, scheduler,
	// node DNS, kiln-net, kube-proxy, coredns, 4 anchors + discovery anchor.
	kubeSystemPods = 13
	serviceName    = "kubernetes.default.svc.cluster.local"
)

func configs(t *testing.T, siteYAML string) map[string][]byte {
	t.Helper()
	cfgs, err := cluster.Configs(siteYAML, filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	return cfgs
}

func eventually(t *testing.T, what string, bound time.Duration, check func() error) {
	t.Helper()
	if err := cluster.Eventually(context.Background(), bound, check); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// checkCluster asserts what an operator would look at first: the node is
// Ready, every kube-system pod runs, and a pod resolves the kubernetes
// service through cluster DNS and its logs read back.
func checkCluster(t *testing.T, kube kubernetes.Interface, image string, since time.Time) {
	t.Helper()
	ctx := context.Background()
	eventually(t, "node g1 Ready", 5*time.Minute, func() error { return cluster.NodeReady(ctx, kube, "g1", since) })
	eventually(t, "every kube-system pod Running", 10*time.Minute, func() error { return cluster.KubeSystemRunning(ctx, kube, kubeSystemPods, since) })
	logs, err := cluster.DNSCheck(ctx, kube, image, serviceName)
	if err != nil || !strings.Contains(logs, "resolved "+serviceName+": [10.96.0.1]") {
		t.Fatalf("DNS check pod: %v, logs %q", err, logs)
	}
}

// Genesis scenarios 1 and 2: the default ISO with a genesis config from
// kiln gen becomes a one-node cluster that the host reaches through
// hostfwd; after a ConfigMap is written the VM loses power and boots
// again with no config attached, and the cluster comes back by itself.
func TestGenesisBootsAndSurvivesPowerCut(t *testing.T) {
	out := outDir(t)
	dir := logDir(t, out)
	image, err := cluster.KilnImage(out)
	if err != nil {
		t.Fatal(err)
	}
	cfgs := configs(t, cluster.GenesisSite(false))
	cfgs["g1"] = withDockerProbe(t, cfgs["g1"], image)
	disk := filepath.Join(dir, "state.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", disk, "8G")
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	v := startVM(t, vm.Config{Name: "genesis", Dir: dir, Firmware: vm.BIOS, Boot: vm.BootISO, MemoryMiB: 3072, CPUs: 2, MAC: cluster.GenesisMAC,
		ISO: filepath.Join(out, "node.iso"), Disks: []vm.Disk{{Path: disk, Format: "qcow2"}},
		HostFwd: []string{fmt.Sprintf("tcp:127.0.0.1:%d-10.0.2.50:6443", port)}, Ignition: cfgs["g1"]})
	ctx := context.Background()
	line, err := v.WaitLine(ctx, mustRe(genesisEnded), genesisBoot)
	if err != nil || !strings.Contains(line, genesisDone) {
		t.Fatalf("genesis: %q %v", line, err)
	}
	t.Logf("boot 1: %s (%s after power-on)", line, v.Uptime().Round(time.Second))
	expectFields(t, waitLine(t, v, `probe: docker=`), map[string]string{"docker": "ok"})
	kube, err := cluster.HostClient(cfgs["g1"], port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the cluster when the test failed:\n%s", cluster.Describe(context.Background(), kube))
		}
	})
	checkCluster(t, kube, image, time.Time{})

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "survives-power-cut"}, Data: map[string]string{"written": time.Now().UTC().Format(time.RFC3339Nano)}}
	if _, err := kube.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The apiserver answered after etcd committed (and fsynced) the write:
	// the plug is pulled at once.
	v.PowerCut()
	v.Ignition = nil
	restart := time.Now().Add(-5 * time.Second) // the guest clock starts from the host's RTC
	if err := v.Restart(); err != nil {
		t.Fatal(err)
	}
	line, err = v.WaitLine(ctx, mustRe(genesisEnded), genesisBoot)
	if err != nil || !strings.Contains(line, "restored") {
		t.Fatalf("after the power cut: %q %v", line, err)
	}
	t.Logf("boot 2: %s (%s after power-on)", line, v.Uptime().Round(time.Second))
	if src, ok := v.Find(mustRe(`kiln-firstboot: done source=`)); !ok || !strings.Contains(src, "source=state") {
		t.Errorf("boot 2 config source: %q, want the state partition", src)
	}
	got, err := kube.CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{})
	if err != nil || got.Data["written"] != cm.Data["written"] {
		t.Fatalf("the ConfigMap after the power cut: %v %v", got, err)
	}
	checkCluster(t, kube, image, restart)
}

// withDockerProbe adds a unit that loads the baked kiln image into Docker
// (beside containerd 2, which the kubelet uses) and runs it, printing the
// result and, on failure, Docker's last words to the console.
func withDockerProbe(t *testing.T, cfg []byte, image string) []byte {
	var c map[string]any
	if err := json.Unmarshal(cfg, &c); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\nout=$( (docker load -i /usr/lib/kiln/images/kiln.tar && docker run --rm --network none " + image +
		" --version) 2>&1 )\nif echo \"$out\" | grep -q '^kiln version'; then r=ok; else r=failed; fi\n" +
		"echo \"probe: docker=$r\" > /dev/ttyS0\n[ $r = ok ] || echo \"$out\" | tail -3 > /dev/ttyS0\n"
	unit := "[Unit]\nAfter=docker.service kiln-role.service\nRequires=docker.service\n[Service]\nType=oneshot\n" +
		"ExecStart=/bin/sh /var/lib/kiln/docker-probe.sh\n[Install]\nWantedBy=multi-user.target\n"
	storage, _ := c["storage"].(map[string]any)
	if storage == nil {
		storage = map[string]any{}
	}
	files, _ := storage["files"].([]any)
	storage["files"] = append(files, map[string]any{"path": "/var/lib/kiln/docker-probe.sh", "mode": 0o755,
		"contents": map[string]any{"source": "data:;base64," + base64.StdEncoding.EncodeToString([]byte(script))}})
	c["storage"] = storage
	sd, _ := c["systemd"].(map[string]any)
	if sd == nil {
		sd = map[string]any{}
	}
	units, _ := sd["units"].([]any)
	sd["units"] = append(units, map[string]any{"name": "kiln-test-docker.service", "enabled": true, "contents": unit})
	c["systemd"] = sd
	return mustJSON(t, c)
}

// Genesis scenario 3: a genesis config for a site whose other master
// already runs etcd (a real etcd on the host, reached as 10.0.2.2, with
// that master's certificate) refuses to bootstrap and says why.
func TestGenesisRefusesWhenEtcdAnswers(t *testing.T) {
	out := outDir(t)
	dir := logDir(t, out)
	cfgs := configs(t, cluster.GenesisSite(true))
	pkiDir := t.TempDir()
	for _, f := range []string{"etcd-server.crt", "etcd-server.key", "etcd/ca.crt"} {
		data, err := cluster.File(cfgs["m2"], "/etc/kiln/pki/"+f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkiDir, filepath.Base(f)), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := net.Dial("tcp", "127.0.0.1:2379"); err == nil {
		c.Close()
		t.Fatal("127.0.0.1:2379 is taken: the refusal scenario runs etcd there (the guest reaches it as 10.0.2.2:2379)")
	}
	etcd := exec.Command(etcdBinary(t), "--name", "m2", "--data-dir", filepath.Join(t.TempDir(), "etcd"),
		"--listen-client-urls", "https://127.0.0.1:2379", "--advertise-client-urls", "https://10.0.2.2:2379",
		"--listen-peer-urls", "http://127.0.0.1:0", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "m2=http://127.0.0.1:2380", "--listen-metrics-urls", "http://127.0.0.1:0",
		"--cert-file", filepath.Join(pkiDir, "etcd-server.crt"), "--key-file", filepath.Join(pkiDir, "etcd-server.key"),
		"--trusted-ca-file", filepath.Join(pkiDir, "ca.crt"), "--client-cert-auth")
	etcdLog, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	etcd.Stdout, etcd.Stderr = etcdLog, etcdLog
	if err := etcd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Process.Kill(); etcd.Wait() })
	eventually(t, "the host etcd listening", time.Minute, func() error {
		c, err := net.Dial("tcp", "127.0.0.1:2379")
		if err == nil {
			c.Close()
		}
		return err
	})
	disk := filepath.Join(dir, "state.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", disk, "2G")
	v := startVM(t, vm.Config{Name: "refuse", Dir: dir, Firmware: vm.BIOS, Boot: vm.BootISO, MAC: cluster.GenesisMAC,
		ISO: filepath.Join(out, "node.iso"), Disks: []vm.Disk{{Path: disk, Format: "qcow2"}}, Ignition: cfgs["g1"]})
	line := waitLine(t, v, `kiln-firstboot: (done role=|error: role)`)
	if !strings.Contains(line, "refusing to bootstrap: etcd already answers at master m2 (10.0.2.2:2379)") {
		t.Fatalf("got %q, want the refusal", line)
	}
	if l, ok := v.Find(mustRe(`node files written|kubelet started`)); ok {
		t.Errorf("the refusing node changed something: %q", l)
	}
}

// etcdBinary is the etcd the default image bakes, from the component
// build cache (make image built it).
func etcdBinary(t *testing.T) string {
	spec, err := images.Load("")
	if err != nil {
		t.Fatal(err)
	}
	cache := gobuild.DefaultCacheDir()
	bins, err := gobuild.Builder{CacheDir: cache}.Build(context.Background(), gobuild.EtcdTarget(spec.Components.Etcd.Version))
	if err != nil {
		t.Fatal(err)
	}
	return bins["etcd"]
}
