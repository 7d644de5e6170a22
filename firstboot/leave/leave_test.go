package leave

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kiln-project/kiln/contract/nodefile"
)

type recorder struct{ cmds []string }

func (r *recorder) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	r.cmds = append(r.cmds, name+" "+strings.Join(args, " "))
	return nil, nil
}

func TestWatcher(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		noNode      bool
		wantLeave   bool
	}{
		{name: "marked removed", annotations: map[string]string{nodefile.RemovedAnnotation: "2026-11-25T03:00:00Z"}, wantLeave: true},
		{name: "not marked", annotations: map[string]string{"other": "x"}},
		{name: "no Node (not registered yet, or deleted without the mark)", noNode: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			if !tc.noNode {
				cs = fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Annotations: tc.annotations}})
			}
			root, sys := t.TempDir(), &recorder{}
			var console []string
			w := &Watcher{Kube: cs, Node: "w1", Root: root, Sys: sys, Interval: 10 * time.Millisecond,
				Console: func(f string, a ...any) { console = append(console, fmt.Sprintf(f, a...)) },
				Now:     func() time.Time { return time.Date(2026, 11, 25, 3, 1, 0, 0, time.UTC) }}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			err := w.Run(ctx)
			stamp, removed := Removed(root)
			if !tc.wantLeave {
				if err != context.DeadlineExceeded || removed || len(sys.cmds) > 0 {
					t.Fatalf("left without the mark: err %v, stamp %q, commands %v", err, stamp, sys.cmds)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !removed || !strings.Contains(stamp, "2026-11-25T03:00:00Z") {
				t.Errorf("stamp %q, %v", stamp, removed)
			}
			if want := "systemctl stop kubelet.service kubepods.slice"; len(sys.cmds) != 1 || sys.cmds[0] != want {
				t.Errorf("commands %v, want %q", sys.cmds, want)
			}
			n, _ := cs.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
			if n.Annotations[nodefile.LeftAnnotation] != "2026-11-25T03:01:00Z" {
				t.Errorf("annotations %v, want %s", n.Annotations, nodefile.LeftAnnotation)
			}
			if len(console) != 2 || !strings.Contains(console[0], "stays out until it is re-imaged") || console[1] != "left the cluster" {
				t.Errorf("console %q", console)
			}
		})
	}
}

// A master whose etcd member kiln node remove took out still has an
// apiserver that answers, with errors, and the discovery name may lead
// to it: the mark is read through the other masters' addresses.
func TestMarkIsReadThroughAnotherMaster(t *testing.T) {
	failing := func(err error) *fake.Clientset {
		cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m2"}})
		cs.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err })
		return cs
	}
	marked := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m2", Annotations: map[string]string{nodefile.RemovedAnnotation: "2026-11-27T20:56:42Z"}}}
	for _, tc := range []struct {
		name      string
		fallbacks []kubernetes.Interface
		wantLeave bool
	}{
		{name: "the second other master has the mark", wantLeave: true,
			fallbacks: []kubernetes.Interface{failing(errors.New("dial tcp 10.77.0.13:6443: connect: no route to host")), fake.NewClientset(marked)}},
		{name: "no other master answers",
			fallbacks: []kubernetes.Interface{failing(errors.New("dial tcp 10.77.0.11:6443: i/o timeout"))}},
		{name: "another master answers the Node is not marked",
			fallbacks: []kubernetes.Interface{fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m2"}})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, sys := t.TempDir(), &recorder{}
			own := failing(apierrors.NewInternalError(errors.New("etcdserver: the member has been permanently removed from the cluster")))
			w := &Watcher{Kube: own, Fallbacks: tc.fallbacks, Node: "m2", Root: root, Sys: sys, Interval: 10 * time.Millisecond,
				Console: func(string, ...any) {}}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			err := w.Run(ctx)
			_, removed := Removed(root)
			if tc.wantLeave != removed || (err == nil) != tc.wantLeave {
				t.Fatalf("left %v (err %v, commands %v), want %v", removed, err, sys.cmds, tc.wantLeave)
			}
		})
	}
}

// Once its pods are stopped a node may no longer reach the discovery
// name (the node-local CoreDNS was one of them; a master's own apiserver
// too): it answers through the other masters' addresses, in turn.
func TestLeaveAnswersThroughAnotherMaster(t *testing.T) {
	node := func() *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m2"}} }
	unreachable := func(why string) *fake.Clientset {
		cs := fake.NewClientset(node())
		cs.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New(why)
		})
		return cs
	}
	for _, tc := range []struct {
		name      string
		fallbacks []*fake.Clientset
		wantLast  string
	}{
		{name: "the second master answers", fallbacks: []*fake.Clientset{unreachable("m1: connection refused"), fake.NewClientset(node())},
			wantLast: "left the cluster"},
		{name: "no master answers", fallbacks: []*fake.Clientset{unreachable("m1: connection refused")},
			wantLast: "left the cluster; could not say so on Node m2: m1: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var console []string
			w := &Watcher{Kube: unreachable("lookup kube-apiserver.kiln.internal on 169.254.20.10:53: connection refused"), Node: "m2",
				Root: t.TempDir(), Sys: &recorder{}, Console: func(f string, a ...any) { console = append(console, fmt.Sprintf(f, a...)) },
				Now: func() time.Time { return time.Date(2026, 11, 26, 3, 50, 0, 0, time.UTC) }}
			for _, f := range tc.fallbacks {
				w.Fallbacks = append(w.Fallbacks, f)
			}
			if err := w.Leave(context.Background(), "2026-11-26T03:49:18Z"); err != nil {
				t.Fatal(err)
			}
			if last := console[len(console)-1]; last != tc.wantLast {
				t.Errorf("console ends %q, want %q", last, tc.wantLast)
			}
			if tc.wantLast == "left the cluster" {
				n, _ := tc.fallbacks[len(tc.fallbacks)-1].CoreV1().Nodes().Get(context.Background(), "m2", metav1.GetOptions{})
				if n.Annotations[nodefile.LeftAnnotation] != "2026-11-26T03:50:00Z" {
					t.Errorf("the answering master's Node m2 has annotations %v", n.Annotations)
				}
			}
		})
	}
}

// NewWatcher answers through every master but the node itself, at its
// address.
func TestNewWatcherFallsBackToTheOtherMasters(t *testing.T) {
	root := t.TempDir()
	write(t, root, nodefile.Path, `{"apiVersion": "`+nodefile.APIVersion+`", "kind": "`+nodefile.Kind+`", "name": "m2", "role": "master",
		"cluster": {"apiServerPort": 6443, "discoveryName": "kube-apiserver.kiln.internal"},
		"masters": [{"name": "m1", "address": "10.77.0.11"}, {"name": "m2", "address": "10.77.0.12"}, {"name": "m3", "address": "10.77.0.13"}]}`)
	write(t, root, filepath.Join(nodefile.KubeconfigDir, "kubelet.conf"), kubeconfig)
	w, err := NewWatcher(root, &recorder{}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, f := range w.Fallbacks {
		hosts = append(hosts, f.(*kubernetes.Clientset).CoreV1().RESTClient().Get().URL().Host)
	}
	if want := []string{"10.77.0.11:6443", "10.77.0.13:6443"}; !slices.Equal(hosts, want) {
		t.Errorf("fallbacks at %v, want %v", hosts, want)
	}
}

// stuckStop is a host whose first systemctl stop does not return before
// its context ends: a pod that ignores SIGTERM.
type stuckStop struct{ cmds []string }

func (s *stuckStop) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := name + " " + strings.Join(args, " ")
	s.cmds = append(s.cmds, cmd)
	if len(s.cmds) == 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nil, nil
}

// Pods that do not stop within the grace are killed, and the stop is
// waited for again: the node leaves in time for kiln node remove's wait.
func TestLeaveKillsPodsThatDoNotStop(t *testing.T) {
	sys := &stuckStop{}
	var console []string
	w := &Watcher{Kube: fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m2"}}), Node: "m2", Root: t.TempDir(),
		Sys: sys, StopGrace: 50 * time.Millisecond, Console: func(f string, a ...any) { console = append(console, fmt.Sprintf(f, a...)) }}
	start := time.Now()
	if err := w.Leave(context.Background(), "2026-11-27T21:42:01Z"); err != nil {
		t.Fatal(err)
	}
	want := []string{"systemctl stop kubelet.service kubepods.slice", "systemctl kill --signal=SIGKILL kubepods.slice", "systemctl stop kubelet.service kubepods.slice"}
	if !slices.Equal(sys.cmds, want) {
		t.Errorf("commands %q, want %q", sys.cmds, want)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("leaving took %s with a 50ms grace", took)
	}
	if !slices.ContainsFunc(console, func(l string) bool { return strings.Contains(l, "did not stop within 50ms: killing") }) {
		t.Errorf("console %q does not say the pods were killed", console)
	}
	if _, removed := Removed(w.Root); !removed {
		t.Error("no removal stamp")
	}
}
