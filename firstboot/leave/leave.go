// Package leave makes a node that kiln node remove took out of the
// cluster leave it for good. A running kubelet whose Node was deleted
// registers it again, so deleting the Node is not enough: the node
// itself must stop. kiln-leave.service polls the node's own Node object
// with the kubelet's credential; once it carries
// nodefile.RemovedAnnotation, the node records nodefile.RemovedStamp on
// its state partition (so later boots stay out too), stops the kubelet
// and every pod, says so on the console and answers with
// nodefile.LeftAnnotation.
package leave

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/nodefile"
)

// Runner runs host commands (systemctl).
type Runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// StopUnits are what leaving stops: the kubelet first, so that nothing
// restarts a pod, then the slice every pod's containers run in (the
// kubelet's systemd cgroup driver), static control-plane pods included.
var StopUnits = []string{"kubelet.service", "kubepods.slice"}

// Watcher waits for the node's removal and then leaves.
type Watcher struct {
	Kube     kubernetes.Interface
	Node     string
	Root     string // "/" on a node
	Sys      Runner
	Console  func(format string, args ...any)
	Interval time.Duration // between two reads of the Node
	Now      func() time.Time
	// Fallbacks answer on the Node when Kube cannot once the pods are
	// stopped: Kube goes through the discovery name, which the node-local
	// CoreDNS (a static pod, stopped with the rest) resolved, and a
	// master's own apiserver stops with its pods. One client per other
	// master, at its address.
	Fallbacks []kubernetes.Interface
}

// Removed reads the stamp a node that left keeps: its text, and whether
// there is one.
func Removed(root string) (string, bool) {
	data, err := os.ReadFile(filepath.Join(root, nodefile.RemovedStamp))
	if err != nil {
		return "", false
	}
	return string(data), true
}

// Run reads the Node every Interval until it is marked removed, then
// leaves and returns. Errors reading the Node (the apiservers down, the
// Node not yet or no longer there) are not a removal: it keeps reading.
func (w *Watcher) Run(ctx context.Context) error {
	for {
		node, err := w.Kube.CoreV1().Nodes().Get(ctx, w.Node, metav1.GetOptions{})
		if err == nil {
			if at, ok := node.Annotations[nodefile.RemovedAnnotation]; ok {
				return w.Leave(ctx, at)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(w.Interval):
		}
	}
}

// Leave records the removal, stops the kubelet and the pods, and
// answers on the Node. The stamp comes first: a power cut in the middle
// still leaves a node that stays out.
func (w *Watcher) Leave(ctx context.Context, at string) error {
	text := fmt.Sprintf("removed from the cluster by kiln node remove at %s\n", at)
	if err := atomicfile.WriteFile(filepath.Join(w.Root, nodefile.RemovedStamp), []byte(text), 0o644, nil); err != nil {
		return fmt.Errorf("recording the removal: %w", err)
	}
	w.Console("removed from the cluster (kiln node remove at %s): stopping the kubelet and every pod; this machine stays out until it is re-imaged with a blank state disk", at)
	args := append([]string{"stop"}, StopUnits...)
	if out, err := w.Sys.Run(ctx, "systemctl", args...); err != nil {
		return fmt.Errorf("systemctl stop %v: %w: %s", StopUnits, err, out)
	}
	left := w.now().UTC().Format(time.RFC3339)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{nodefile.LeftAnnotation: left}}})
	var err error
	for _, kube := range append([]kubernetes.Interface{w.Kube}, w.Fallbacks...) {
		if _, err = kube.CoreV1().Nodes().Patch(ctx, w.Node, types.MergePatchType, patch, metav1.PatchOptions{}); err == nil {
			w.Console("left the cluster")
			return nil
		}
	}
	// The node has left; kiln node remove goes on after its bound.
	w.Console("left the cluster; could not say so on Node %s: %v", w.Node, err)
	return nil
}

func (w *Watcher) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

// kubeletCurrent is the client certificate the kubelet renewed last
// (certificate and key in one file), which outlives the kubeconfig's.
const kubeletCurrent = "/var/lib/kubelet/pki/kubelet-client-current.pem"

// NewWatcher is the node's watcher: its name from the node file, the
// kubelet's kubeconfig, with the kubelet's renewed certificate when there
// is one, and a client at each other master's address to answer through
// once its pods are stopped. It polls every 10 s.
func NewWatcher(root string, sys Runner, console func(format string, args ...any)) (*Watcher, error) {
	f, err := nodefile.Read(filepath.Join(root, nodefile.Path))
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(root, nodefile.KubeconfigDir, "kubelet.conf")
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("the kubelet's kubeconfig: %w", err)
	}
	if current := filepath.Join(root, kubeletCurrent); fileExists(current) {
		cfg.TLSClientConfig.CertData, cfg.TLSClientConfig.KeyData = nil, nil
		cfg.TLSClientConfig.CertFile, cfg.TLSClientConfig.KeyFile = current, current
	}
	cfg.Timeout = 30 * time.Second
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	w := &Watcher{Kube: kube, Node: f.Name, Root: root, Sys: sys, Console: console, Interval: 10 * time.Second}
	for _, m := range f.Masters {
		if m.Name == f.Name {
			continue
		}
		// An apiserver's certificate names its master's address too.
		at := rest.CopyConfig(cfg)
		at.Host = "https://" + net.JoinHostPort(m.Address, strconv.Itoa(f.Cluster.APIServerPort))
		at.Timeout = 15 * time.Second
		c, err := kubernetes.NewForConfig(at)
		if err != nil {
			return nil, err
		}
		w.Fallbacks = append(w.Fallbacks, c)
	}
	return w, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
