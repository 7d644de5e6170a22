package role

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kiln-project/kiln/builder/realbin"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/freeport"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// realControlPlane is the genesis node g1's etcd and kube-apiserver (the
// binaries the default image bakes, from the component cache) started on
// the host with the node's own certificates and the apiserver's
// static-pod flags, on free ports. Runs with KILN_INTEGRATION=1 after
// make image filled the cache.
type realControlPlane struct {
	root     string
	node     *Node
	bins     map[string]string
	etcdPort int
	apiPort  int
	// serverName is the name the apiserver's certificate is checked for.
	serverName string
	cluster    *cluster
	// config is the agent's (system:masters), which may impersonate.
	config *rest.Config
}

func startRealControlPlane(t *testing.T) *realControlPlane {
	t.Helper()
	if os.Getenv("KILN_INTEGRATION") != "1" {
		t.Skip("set KILN_INTEGRATION=1 (make integration) to run etcd and kube-apiserver on the host")
	}
	root, _ := nodeRoot(t, "g1")
	n := &Node{Root: root, Log: t.Logf}
	loaded, err := loadFiles(n)
	if err != nil {
		t.Fatal(err)
	}
	n.file, n.cat = loaded.file, loaded.cat
	bins := realbin.ControlPlane(t)
	etcdPort, peerPort := freePort(t), freePort(t)
	pki := func(f string) string { return filepath.Join(root, nodefile.PKIDir, f) }
	realbin.Start(t, "etcd", bins["etcd"], "--name", "g1", "--data-dir", filepath.Join(t.TempDir(), "etcd"),
		"--listen-client-urls", fmt.Sprintf("https://127.0.0.1:%d", etcdPort), "--advertise-client-urls", fmt.Sprintf("https://127.0.0.1:%d", etcdPort),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort), "--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
		"--initial-cluster", fmt.Sprintf("g1=http://127.0.0.1:%d", peerPort), "--listen-metrics-urls", "http://127.0.0.1:0",
		"--cert-file", pki("etcd-server.crt"), "--key-file", pki("etcd-server.key"), "--trusted-ca-file", pki("etcd/ca.crt"), "--client-cert-auth")
	apiPort, rc, c := startRealAPIServer(t, root, n, bins, etcdPort)
	return &realControlPlane{root: root, node: n, bins: bins, etcdPort: etcdPort, apiPort: apiPort, serverName: rc.TLSClientConfig.ServerName, cluster: c, config: rc}
}

// startRealAPIServer starts the apiserver as its static pod runs it,
// on the test's ports and paths, on the etcd at etcdPort, and waits
// until it is ready.
func startRealAPIServer(t *testing.T, root string, n *Node, bins map[string]string, etcdPort int) (int, *rest.Config, *cluster) {
	t.Helper()
	apiPort := freePort(t)
	// The apiserver as its static pod runs it, on the test's ports and paths.
	params := n.units().env.params(etcdmember.Genesis("g1", n.file.Address))
	writeAPIServerConfig(t, root, params)
	args := hostArgs(root, manifests.APIServer(params).Spec.Containers[0].Command[1:], map[string]string{
		"--etcd-servers": fmt.Sprintf("https://127.0.0.1:%d", etcdPort),
		"--secure-port":  fmt.Sprint(apiPort),
	})
	realbin.Start(t, "kube-apiserver", bins["kube-apiserver"], append(args, "--bind-address=127.0.0.1")...)

	rc, err := clientcmd.BuildConfigFromFlags("", localKubeconfig(t, root, nodefile.AgentKubeconfig, apiPort))
	if err != nil {
		t.Fatal(err)
	}
	c, err := newCluster(rc, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	ready := func(ctx context.Context) error { return clustercheck.APIServerReady(ctx, c.kube) }
	if err := retry.Wait(context.Background(), "apiserver ready", 3*time.Minute, t.Logf, ready); err != nil {
		t.Fatal(err)
	}
	return apiPort, rc, c
}

// hostArgs turns a static pod's flags into the host's: node paths under
// root, and the flags in set replaced.
func hostArgs(root string, flags []string, set map[string]string) []string {
	var args []string
	for _, a := range flags {
		a = strings.ReplaceAll(a, nodefile.Dir+"/", filepath.Join(root, nodefile.Dir)+"/")
		a = strings.ReplaceAll(a, manifests.AuditLogDir, filepath.Join(root, manifests.AuditLogDir))
		if name, _, ok := strings.Cut(a, "="); ok {
			if v, replaced := set[name]; replaced {
				a = name + "=" + v
			}
		}
		args = append(args, a)
	}
	return args
}

// localKubeconfig rewrites one of the node's kubeconfigs to reach the
// host's apiserver (the discovery name becomes the TLS server name) and
// returns the rewritten file.
func localKubeconfig(t *testing.T, root, path string, apiPort int) string {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kc.Clusters {
		c.TLSServerName, _, _ = net.SplitHostPort(strings.TrimPrefix(c.Server, "https://"))
		c.Server = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
		underRoot(root, &c.CertificateAuthority)
	}
	for _, a := range kc.AuthInfos {
		underRoot(root, &a.ClientCertificate)
		underRoot(root, &a.ClientKey)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := clientcmd.WriteToFile(*kc, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// underRoot moves a node path of a kubeconfig under root.
func underRoot(root string, path *string) {
	if *path != "" && !strings.HasPrefix(*path, root) {
		*path = filepath.Join(root, *path)
	}
}

// Against a real etcd and kube-apiserver: every add-on object applies by
// server-side apply, twice (the second is a no-op), and the node label
// patch is accepted.
func TestAddOnsApplyToARealAPIServer(t *testing.T) {
	cp := startRealControlPlane(t)
	n, c, ctx := cp.node, cp.cluster, context.Background()
	for i := 0; i < 2; i++ {
		if err := c.applyAddOns(ctx, n.units().env.params(etcdmember.Membership{})); err != nil {
			t.Fatalf("apply %d: %v", i+1, err)
		}
	}
	ds, err := c.kube.AppsV1().DaemonSets("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil || len(ds.Items) != 4 { // kiln-net, kube-proxy, the masters' anchor, the discovery anchor
		t.Fatalf("DaemonSets: %d, %v", len(ds.Items), err)
	}
	svc, err := c.kube.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP != n.file.Cluster.ClusterDNS {
		t.Fatalf("kube-dns service: %v %v", svc, err)
	}
	anchorsReadOnlyTheKubernetesEndpoints(t, cp)
	staticPodsValidate(t, cp)
}

// The static pods, as the apiserver validates their mirror pods: each is
// created with a dry run (for every timing profile, so etcd under
// rt-exec too).
func staticPodsValidate(t *testing.T, cp *realControlPlane) {
	ctx := context.Background()
	for _, timing := range nodefile.Timings {
		f := *cp.node.file
		f.Cluster.Timing = timing
		p := manifests.GenesisParams(f, manifests.Images{Etcd: "e", APIServer: "a", ControllerManager: "c", Scheduler: "s", CoreDNS: "d"})
		for _, pod := range append(manifests.ControlPlane(p), manifests.NodeLocalDNS(p)) {
			pod.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "dry-run"}
			pod.Spec.NodeName = f.Name
			_, err := cp.cluster.kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				t.Errorf("%s (timing %s): %v", pod.Name, timing, err)
			}
		}
	}
}

// Under the anchors' service accounts, as the add-ons bind them: the
// kubernetes Endpoints (which the apiserver keeps) read as the anchor
// reads it, and every other way to endpoints refused.
func anchorsReadOnlyTheKubernetesEndpoints(t *testing.T, cp *realControlPlane) {
	ctx := context.Background()
	other := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: manifests.DiscoveryNamespace}}
	if _, err := cp.cluster.kube.CoreV1().Endpoints(other.Namespace).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{manifests.OthersAnchor, manifests.MastersAnchor} {
		cfg := rest.CopyConfig(cp.config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:kube-system:" + sa}
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// RBAC takes a moment to see the new binding.
		err = retry.Wait(ctx, sa+" reads the kubernetes Endpoints", time.Minute, t.Logf, func(ctx context.Context) error {
			_, err := kube.CoreV1().Endpoints(manifests.DiscoveryNamespace).Get(ctx, manifests.DiscoveryEndpoints, metav1.GetOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		for what, err := range map[string]error{
			"get default/other": func() error {
				_, err := kube.CoreV1().Endpoints(other.Namespace).Get(ctx, other.Name, metav1.GetOptions{})
				return err
			}(),
			"list default": func() error {
				_, err := kube.CoreV1().Endpoints(manifests.DiscoveryNamespace).List(ctx, metav1.ListOptions{})
				return err
			}(),
			"get kube-system/kube-dns": func() error {
				_, err := kube.CoreV1().Endpoints("kube-system").Get(ctx, manifests.ClusterDNSService, metav1.GetOptions{})
				return err
			}(),
			"update default/kubernetes": func() error {
				ep, err := cp.cluster.kube.CoreV1().Endpoints(manifests.DiscoveryNamespace).Get(ctx, manifests.DiscoveryEndpoints, metav1.GetOptions{})
				if err != nil {
					return err
				}
				_, err = kube.CoreV1().Endpoints(manifests.DiscoveryNamespace).Update(ctx, ep, metav1.UpdateOptions{})
				return err
			}(),
		} {
			if !apierrors.IsForbidden(err) {
				t.Errorf("%s: %s: %v, want forbidden", sa, what, err)
			}
		}
	}
}

// The readiness check a joining master leaves out is one the baked
// apiserver has: a name it did not know would be
// excluded silently, with a warning only in the verbose answer.
func TestRBACDefaultsHookIsARealAPIServerCheck(t *testing.T) {
	cp := startRealControlPlane(t)
	body, err := cp.cluster.kube.Discovery().RESTClient().Get().AbsPath("/readyz").
		Param("verbose", "1").Param("exclude", clustercheck.RBACDefaultsHook).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("readyz: %v\n%s", err, body)
	}
	if !strings.Contains(string(body), "[+]"+clustercheck.RBACDefaultsHook+" excluded: ok") || strings.Contains(string(body), "cannot be excluded") {
		t.Fatalf("readyz excluding %s:\n%s", clustercheck.RBACDefaultsHook, body)
	}
	if err := clustercheck.APIServerReady(context.Background(), cp.cluster.kube, clustercheck.RBACDefaultsHook); err != nil {
		t.Fatal(err)
	}
}

// freePort is a port for a server the test starts (freeport: not one an
// outgoing connection can take before the server binds it).
func freePort(t *testing.T) int {
	t.Helper()
	port, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// writeAPIServerConfig puts the configuration files the role renders for
// the apiserver (its audit policy, its authentication configuration)
// under root, as the role's start phase does on the node.
func writeAPIServerConfig(t *testing.T, root string, p manifests.Params) {
	t.Helper()
	files, err := manifests.Files(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if filepath.Dir(f.Path) != manifests.APIServerConfigDir {
			continue
		}
		path := filepath.Join(root, f.Path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, f.Content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
