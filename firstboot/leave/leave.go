// Package leave makes a node that was taken out of the cluster leave it
// for good. A running kubelet whose Node was deleted registers it again,
// so deleting the Node is not enough: the node itself must stop.
// kiln-leave.service polls the node's own Node object with the kubelet's
// credential; once it carries nodefile.RemovedAnnotation (kiln node
// remove), the node records nodefile.RemovedStamp on its state partition
// (so later boots stay out too), stops the kubelet and every pod, says so
// on the console and answers with nodefile.LeftAnnotation.
//
// A master also leaves when it is removed through the API: its Node
// deleted, or its master label taken off (master.go). It removes its own
// etcd member first, under the quorum rule kiln node remove applies,
// then stops, moves its control-plane manifests to the backup directory
// and wipes its etcd data.
package leave

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/firstboot/kubeletclient"
	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/internal/command"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// StopUnits are what leaving stops: the kubelet first, so that nothing
// restarts a pod, then the slice every pod's containers run in (the
// kubelet's systemd cgroup driver), static control-plane pods included.
var StopUnits = []string{"kubelet.service", podsSlice}

const podsSlice = "kubepods.slice"

// DefaultStopGrace bounds the wait for the pods to stop on systemd's
// SIGTERM before leaving kills what is left, as the kubelet gives a pod
// 30 s by default. systemd's own bound is 90 s for each pod's scope, and
// a removed master's apiserver used all of it, draining requests that
// waited for its etcd member, which was already gone: kiln node remove
// gave up waiting for the node's answer first.
const DefaultStopGrace = 30 * time.Second

// Watcher waits for the node's removal and then leaves.
type Watcher struct {
	Kube     kubernetes.Interface
	Node     string
	Root     string         // "/" on a node
	Sys      command.Runner // host commands (systemctl)
	Console  func(format string, args ...any)
	Interval time.Duration // between two reads of the Node
	Now      func() time.Time
	// Fallbacks read the Node when Kube cannot (readNode), and answer on
	// it once the pods are stopped: Kube goes through the discovery name,
	// which the node-local CoreDNS (a static pod, stopped with the rest)
	// resolved, and a master's own apiserver stops with its pods. One
	// client per other master, at its address.
	Fallbacks []kubernetes.Interface
	// Master is set on a master: what it needs to leave the control
	// plane when it is removed through the API.
	Master *Master
	// StopGrace bounds the pods' stop before the rest are killed
	// (DefaultStopGrace if 0).
	StopGrace time.Duration
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

// Run reads the Node every Interval (readNode) until it is marked
// removed, then leaves and returns. Errors reading the Node (the
// apiservers down, the Node not yet or no longer there) are not a
// removal: it keeps reading.
//
// A master (Master set) also leaves when two reads in a row, an Interval
// apart, find its Node deleted or without the master label, once this
// master had been labelled; a leave the quorum rule refuses is said on
// the console and tried again at the next read.
func (w *Watcher) Run(ctx context.Context) error {
	seen, lastRefusal := 0, ""
	var left error
	err := retry.WaitEvery(ctx, "this node's removal", retry.NoBound, w.Interval, nil, func(context.Context) error {
		node, err := w.readNode(ctx)
		if err == nil {
			if at, ok := node.Annotations[nodefile.RemovedAnnotation]; ok {
				left = w.Leave(ctx, at)
				return nil
			}
		}
		if why, removed := w.masterRemoved(node, err); !removed {
			seen = 0
		} else if seen++; seen >= 2 {
			err := w.LeaveControlPlane(ctx, why)
			if err == nil {
				left = nil
				return nil
			}
			if msg := err.Error(); msg != lastRefusal {
				w.Console("not leaving yet: %s", msg)
				lastRefusal = msg
			}
			return err
		}
		return errNotRemoved
	})
	if err != nil {
		return ctx.Err()
	}
	return left
}

// errNotRemoved is why the watcher reads the Node again.
var errNotRemoved = errors.New("not removed")

// readNode reads the node's own Node through the discovery name, and
// when that fails through each other master's address, in turn. On a
// master kiln node remove takes the etcd member out before it marks the
// Node, and the master's own apiserver goes on answering, with errors:
// the discovery name may lead there (the node-local zone lists this
// master until the discovery anchor reads the Endpoints again, through
// the same apiserver), and the mark would never be read. A Node that is
// not found is an answer, not a failure.
func (w *Watcher) readNode(ctx context.Context) (*corev1.Node, error) {
	var first error // the discovery name's, when no client answers
	for i, kube := range w.clients() {
		node, err := kube.CoreV1().Nodes().Get(ctx, w.Node, metav1.GetOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			return node, err
		}
		if i == 0 {
			first = err
		}
	}
	return nil, first
}

// clients are Kube, then each Fallback: the order the Node is read and
// answered on in.
func (w *Watcher) clients() []kubernetes.Interface {
	return append([]kubernetes.Interface{w.Kube}, w.Fallbacks...)
}

// Leave records the removal, stops the kubelet and the pods, and
// answers on the Node. The stamp comes first: a power cut in the middle
// still leaves a node that stays out.
func (w *Watcher) Leave(ctx context.Context, at string) error {
	text := fmt.Sprintf("removed from the cluster by kiln node remove at %s\n", at)
	if err := w.stop(ctx, text, fmt.Sprintf("removed from the cluster (kiln node remove at %s)", at)); err != nil {
		return err
	}
	if w.Master != nil {
		// kiln node remove took the member out before marking the Node.
		w.retireIfMemberGone(ctx)
	}
	w.sayLeft(ctx)
	return nil
}

// stop records the removal (stamp first: a power cut in the middle
// still leaves a node that stays out), says why on the console, and
// stops the kubelet and every pod.
func (w *Watcher) stop(ctx context.Context, stamp, why string) error {
	if err := atomicfile.WriteFile(filepath.Join(w.Root, nodefile.RemovedStamp), []byte(stamp), 0o644, nil); err != nil {
		return fmt.Errorf("recording the removal: %w", err)
	}
	w.Console("%s: stopping the kubelet and every pod; this machine stays out until it is re-imaged with a blank state disk", why)
	return w.stopUnits(ctx)
}

// stopUnits stops StopUnits, and kills what is still running in the
// pods' slice after the grace. The stop jobs go on in systemd when the
// bounded systemctl is cut off; the second stop waits for them.
func (w *Watcher) stopUnits(ctx context.Context) error {
	args := append([]string{"stop"}, StopUnits...)
	grace := cmp.Or(w.StopGrace, DefaultStopGrace)
	gctx, cancel := context.WithTimeout(ctx, grace)
	_, err := w.Sys.Run(gctx, "systemctl", args...)
	graceOver := gctx.Err() != nil
	cancel()
	if err == nil {
		return nil
	}
	if !graceOver || ctx.Err() != nil {
		return fmt.Errorf("systemctl stop %v: %w", StopUnits, err)
	}
	w.Console("the pods did not stop within %s: killing what is left of %s", grace, podsSlice)
	if _, err := w.Sys.Run(ctx, "systemctl", "kill", "--signal=SIGKILL", podsSlice); err != nil {
		return fmt.Errorf("killing %s: %w", podsSlice, err)
	}
	if _, err := w.Sys.Run(ctx, "systemctl", args...); err != nil {
		return fmt.Errorf("systemctl stop %v after killing %s: %w", StopUnits, podsSlice, err)
	}
	return nil
}

// sayLeft answers on the Node; a node that cannot has left all the same
// (kiln node remove goes on after its bound).
func (w *Watcher) sayLeft(ctx context.Context) {
	if err := w.answer(ctx, w.now().UTC().Format(time.RFC3339)); err != nil {
		w.Console("left the cluster; could not say so on Node %s: %v", w.Node, err)
		return
	}
	w.Console("left the cluster")
}

// answer marks the Node as left, through the discovery name or else
// through each other master's address.
func (w *Watcher) answer(ctx context.Context, left string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{nodefile.LeftAnnotation: left}}})
	var err error
	for _, kube := range w.clients() {
		if _, err = kube.CoreV1().Nodes().Patch(ctx, w.Node, types.MergePatchType, patch, metav1.PatchOptions{}); err == nil {
			return nil
		}
	}
	return err
}

func (w *Watcher) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

// NewWatcher is the node's watcher: its name from the node file, a
// client as the node's kubelet (kubeletclient), and a client at each
// other master's address to answer through once its pods are stopped. It
// polls every 10 s.
func NewWatcher(root string, sys command.Runner, console func(format string, args ...any)) (*Watcher, error) {
	f, err := nodefile.Read(filepath.Join(root, nodefile.Path))
	if err != nil {
		return nil, err
	}
	cfg, err := kubeletclient.Config(root)
	if err != nil {
		return nil, err
	}
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
	if f.Role == nodefile.RoleGenesis || f.Role == nodefile.RoleMaster {
		w.Master = newMaster(root, f)
	}
	return w, nil
}

// newMaster is a master's way out of the control plane: labelled once
// the genesis or master role's label phase is stamped (a genesis machine
// re-imaged joins as a master), its etcd reached through the other
// masters' client URLs with the apiserver's etcd client certificate.
func newMaster(root string, f *nodefile.NodeFile) *Master {
	var others []string
	for _, m := range f.Masters {
		if m.Name != f.Name {
			others = append(others, etcdmember.ClientURL(m.Address))
		}
	}
	return &Master{
		Labelled: func() bool {
			return fileExists(filepath.Join(root, nodefile.StampDir, nodefile.RoleGenesis, "label")) ||
				fileExists(filepath.Join(root, nodefile.StampDir, nodefile.RoleMaster, "label"))
		},
		PeerURL: etcdmember.PeerURL(f.Address),
		Etcd: func() (Etcd, error) {
			if len(others) == 0 {
				return nil, fmt.Errorf("no other master in %s to reach etcd through", nodefile.Path)
			}
			cfg, err := etcdmember.ReadClientTLS(filepath.Join(root, nodefile.PKIDir))
			if err != nil {
				return nil, err
			}
			return etcdmember.Dial(others, cfg)
		},
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
