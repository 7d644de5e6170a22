// Package cluster is what the QEMU genesis scenarios and kiln-bench share
// to make a site's configs and to look at the cluster from the host: a
// client through hostfwd on 127.0.0.1 with the admin kubeconfig, and the
// checks (node Ready, kube-system Running, a DNS check pod).
package cluster

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kiln-project/kiln/nodeconfig"
	"github.com/kiln-project/kiln/pki"
	"github.com/kiln-project/kiln/site"
)

// GenesisMAC is the genesis node's NIC: its static address is matched by it.
const GenesisMAC = "52:54:00:00:00:01"

// GenesisSite is a one-master cluster inside QEMU's user network (the
// genesis node at 10.0.2.50). With a second master, that master is at the
// host's address as the guest sees it (10.0.2.2).
func GenesisSite(withSecondMaster bool) string {
	s := `apiVersion: kiln.dev/v1alpha1
kind: Site
cluster:
  name: qemu
  kubernetesVersion: v1.37.1
  podCIDR: 10.244.0.0/16
  serviceCIDR: 10.96.0.0/12
nodes:
  - {name: g1, role: genesis, macs: ["52:54:00:00:00:01"], installDisk: /dev/vda, network: {address: 10.0.2.50/24, gateway: 10.0.2.2}}
`
	if withSecondMaster {
		s += "  - {name: m2, role: master, macs: [\"52:54:00:00:00:02\"], installDisk: /dev/vda, network: {address: 10.0.2.2/24, gateway: 10.0.2.3}}\n"
	}
	return s
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
// with the admin kubeconfig of cfg, checking the apiserver's certificate
// for the discovery name.
func HostClient(cfg []byte, port int) (kubernetes.Interface, error) {
	data, err := File(cfg, "/etc/kiln/kubeconfig/admin.conf")
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

// FreePort is a free TCP port on 127.0.0.1 for a hostfwd.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Healthy is nil when the apiserver's /readyz says ok.
func Healthy(ctx context.Context, kube kubernetes.Interface) error {
	body, err := kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(body)) != "ok" {
		return fmt.Errorf("readyz: %s", body)
	}
	return nil
}

// NodeReady is nil when the node's Ready condition is True and its
// kubelet reported it at since or later (a power-cut node's stored
// condition stays Ready until the node controller notices).
func NodeReady(ctx context.Context, kube kubernetes.Interface, name string, since time.Time) error {
	n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(since) {
			return nil
		}
	}
	return fmt.Errorf("node %s is not Ready", name)
}

// KubeSystemRunning is nil when every kube-system pod is Running with
// all its containers ready and started at since or later, and there are
// at least min of them. After a power cut the stored pod status still
// says Running until the kubelet reports again; since filters that out.
func KubeSystemRunning(ctx context.Context, kube kubernetes.Interface, min int, since time.Time) error {
	pods, err := kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var bad []string
	for _, p := range pods.Items {
		if why := notRunning(p, since); why != "" {
			bad = append(bad, p.Name+": "+why)
		}
	}
	if len(pods.Items) < min || len(bad) > 0 {
		return fmt.Errorf("%d kube-system pods (want at least %d), not running: %v", len(pods.Items), min, bad)
	}
	return nil
}

func notRunning(p corev1.Pod, since time.Time) string {
	if p.Status.Phase != corev1.PodRunning {
		return string(p.Status.Phase)
	}
	if len(p.Status.ContainerStatuses) == 0 {
		return "no container status"
	}
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case !c.Ready:
			return c.Name + " not ready"
		case c.State.Running == nil:
			return c.Name + " not running"
		case c.State.Running.StartedAt.Time.Before(since.Truncate(time.Second)):
			return c.Name + " started before " + since.UTC().Format(time.RFC3339)
		}
	}
	return ""
}

// Describe is what an operator would read first when a check fails: the
// nodes' Ready conditions, every pod with its phase, restarts and node,
// and the latest events, one line each.
func Describe(ctx context.Context, kube kubernetes.Interface) string {
	var b strings.Builder
	if nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		fmt.Fprintf(&b, "nodes: %v\n", err)
	} else {
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					fmt.Fprintf(&b, "node %s Ready=%s heartbeat=%s %s\n", n.Name, c.Status, c.LastHeartbeatTime.UTC().Format(time.RFC3339), c.Message)
				}
			}
		}
	}
	if pods, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err != nil {
		fmt.Fprintf(&b, "pods: %v\n", err)
	} else {
		for _, p := range pods.Items {
			restarts := int32(0)
			var states []string
			for _, c := range p.Status.ContainerStatuses {
				restarts += c.RestartCount
				switch {
				case c.State.Waiting != nil:
					states = append(states, c.Name+"=waiting:"+c.State.Waiting.Reason)
				case c.State.Terminated != nil:
					states = append(states, c.Name+"=terminated:"+c.State.Terminated.Reason)
				case c.State.Running != nil:
					states = append(states, c.Name+"=running@"+c.State.Running.StartedAt.UTC().Format(time.RFC3339))
				}
			}
			fmt.Fprintf(&b, "pod %s/%s %s ip=%s restarts=%d %v\n", p.Namespace, p.Name, p.Status.Phase, p.Status.PodIP, restarts, states)
		}
	}
	if events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{}); err != nil {
		fmt.Fprintf(&b, "events: %v\n", err)
	} else {
		items := events.Items
		sort.Slice(items, func(i, j int) bool { return items[i].LastTimestamp.Before(&items[j].LastTimestamp) })
		if len(items) > 40 {
			items = items[len(items)-40:]
		}
		for _, e := range items {
			fmt.Fprintf(&b, "event %s %s/%s %s: %s\n", e.LastTimestamp.UTC().Format(time.RFC3339), e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	return b.String()
}

// DNSCheck runs the kiln image's DNS check in a pod, waits for it to end,
// and returns its logs.
func DNSCheck(ctx context.Context, kube kubernetes.Interface, image, name string) (string, error) {
	pods := kube.CoreV1().Pods("default")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "qemu-dns-check-"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "dns", Image: image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/kiln", "check", "dns", "--retry", "60s", name}}}},
	}
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	err = Eventually(ctx, 5*time.Minute, func() error {
		p, err := pods.Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return fmt.Errorf("pod %s is %s", p.Name, p.Status.Phase)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	logs, err := pods.GetLogs(created.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	return string(logs), err
}

// Eventually retries check every 3 s until it passes or bound runs out,
// returning its last error.
func Eventually(ctx context.Context, bound time.Duration, check func() error) error {
	deadline := time.Now().Add(bound)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", bound, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(3 * time.Second):
		}
	}
}

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
