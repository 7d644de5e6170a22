package nodeops

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kiln-project/kiln/contract/removednodes"
	"github.com/kiln-project/kiln/firstboot/leave"
	"github.com/kiln-project/kiln/internal/golden"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// Every case's output is its golden file testdata/remove/<name>.txt.
func TestRemove(t *testing.T) {
	ready, notReady := corev1.ConditionTrue, corev1.ConditionUnknown
	for _, tc := range []struct {
		name    string
		site    string // testSite if ""
		objs    []runtime.Object
		evict   string
		etcd    *fakeEtcd // nil: etcd cannot be reached
		opts    Options
		remove  string
		wantErr string // "" : no error

		nodeAnswers bool // the node's kiln-leave runs beside the removal

		wantRefusal bool
		wantNode    bool     // the Node is still there
		wantMembers []string // etcd's members after
		wantPods    []string // the pods left
	}{
		{name: "worker", remove: "w1",
			objs: []runtime.Object{kubeNode("w1", "worker", "10.0.0.21", ready),
				pod("default", "web-1", "w1", "ReplicaSet"), pod("default", "batch-done", "w1", "", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
				pod("kube-system", "kiln-net-w1", "w1", "DaemonSet"), pod("default", "web-2", "m1", "ReplicaSet")},
			wantPods: []string{"default/web-2"}}, // the DaemonSet pod goes with the Node
		{name: "running worker stops itself", remove: "w1", nodeAnswers: true,
			objs:     []runtime.Object{kubeNode("w1", "worker", "10.0.0.21", ready), pod("default", "web-1", "w1", "ReplicaSet")},
			wantPods: nil},
		{name: "worker without etcd reachable", remove: "w1",
			objs:     []runtime.Object{kubeNode("w1", "worker", "10.0.0.21", ready)},
			wantPods: nil},
		{name: "master", remove: "m2",
			objs: []runtime.Object{kubeNode("m2", "master", "10.0.0.12", ready),
				pod("kube-system", "etcd-m2", "m2", "Node", mirror), pod("kube-system", "coredns-1", "m2", "ReplicaSet")},
			etcd:        &fakeEtcd{members: []etcdmember.Member{m1, m2, m3}},
			wantMembers: []string{"m1", "m3"}, wantPods: nil}, // the static pod's mirror goes with the Node
		{name: "master of two", site: twoMasterSite, remove: "m2",
			objs:        []runtime.Object{kubeNode("m2", "master", "10.0.0.12", ready)},
			etcd:        &fakeEtcd{members: []etcdmember.Member{m1, m2}},
			wantMembers: []string{"m1"}},
		{name: "unstarted learner found by peer URL", remove: "m3",
			objs:        []runtime.Object{kubeNode("m3", "master", "10.0.0.13", ready)},
			etcd:        &fakeEtcd{members: []etcdmember.Member{m1, m2, {ID: 0xb3, PeerURLs: m3.PeerURLs, IsLearner: true}}},
			wantMembers: []string{"m1", "m2"}},
		{name: "second run after everything was done", remove: "m2",
			etcd:        &fakeEtcd{members: []etcdmember.Member{m1, m3}},
			wantMembers: []string{"m1", "m3"}},
		{name: "second run after the node was listed removed", remove: "w1",
			objs: []runtime.Object{removedList(map[string]string{"w1": "removed=2026-03-01T10:00:00Z"})}},
		{name: "second run after the etcd member went", remove: "m2",
			objs: []runtime.Object{func() runtime.Object {
				n := kubeNode("m2", "master", "10.0.0.12", ready)
				n.Spec.Unschedulable = true
				return n
			}()},
			etcd:        &fakeEtcd{members: []etcdmember.Member{m1, m3}},
			wantMembers: []string{"m1", "m3"}},
		{name: "member gone between the list and the removal", remove: "m2",
			etcd:        &fakeEtcd{members: []etcdmember.Member{m1, m2, m3}, removeErr: errors.New("etcdserver: member not found")},
			wantMembers: []string{"m1", "m2", "m3"}},
		{name: "a member the site does not name", remove: "m9",
			etcd:        &fakeEtcd{members: []etcdmember.Member{m1, m2, m3, member(0xa9, "m9", "10.0.0.19")}},
			wantMembers: []string{"m1", "m2", "m3"}},
		{name: "last master refused", site: oneMasterSite, remove: "m1",
			objs: []runtime.Object{kubeNode("m1", "genesis", "10.0.0.11", ready)},
			etcd: &fakeEtcd{members: []etcdmember.Member{m1}}, wantErr: "last master", wantRefusal: true,
			wantNode: true, wantMembers: []string{"m1"}},
		{name: "quorum loss refused", remove: "m1",
			objs: []runtime.Object{kubeNode("m1", "genesis", "10.0.0.11", ready)},
			etcd: &fakeEtcd{members: []etcdmember.Member{m1, m2, m3}, down: downURLs(m3)}, wantErr: "would leave etcd without quorum", wantRefusal: true,
			wantNode: true, wantMembers: []string{"m1", "m2", "m3"}},
		{name: "dead member of two refused", site: twoMasterSite, remove: "m2",
			objs: []runtime.Object{kubeNode("m2", "master", "10.0.0.12", notReady)},
			etcd: &fakeEtcd{members: []etcdmember.Member{m1, m2}, down: downURLs(m2)}, wantErr: "etcd has no quorum", wantRefusal: true,
			wantNode: true, wantMembers: []string{"m1", "m2"}},
		{name: "down master, drain skipped after the bound", remove: "m3", evict: evictStuck, opts: Options{Timeout: 50 * time.Millisecond},
			objs: []runtime.Object{kubeNode("m3", "master", "10.0.0.13", notReady), pod("default", "web-3", "m3", "ReplicaSet"),
				pod("default", "cache", "m3", "ReplicaSet", withEmptyDir)},
			etcd:        &fakeEtcd{members: []etcdmember.Member{m1, m2, m3}, down: downURLs(m3)},
			wantMembers: []string{"m1", "m2"}, wantPods: nil}, // what the skipped drain left goes with the Node
		{name: "a node the site does not name that calls itself a master", remove: "x8",
			objs: []runtime.Object{kubeNode("x8", "worker", "10.0.0.18", notReady, labelled(manifests.RoleLabel, "master"))},
			etcd: &fakeEtcd{members: []etcdmember.Member{m1, m2, m3}}, wantMembers: []string{"m1", "m2", "m3"}},
		{name: "local data refused on a ready node", remove: "w1",
			objs: []runtime.Object{kubeNode("w1", "worker", "10.0.0.21", ready), pod("default", "web-1", "w1", "ReplicaSet"),
				pod("default", "cache", "w1", "ReplicaSet", withEmptyDir), pod("default", "debug", "w1", "")},
			wantErr: "cannot be", wantNode: true, wantPods: []string{"default/cache", "default/debug", "default/web-1"}},
		{name: "local data evicted when allowed", remove: "w1", opts: Options{DeleteEmptyDirData: true, EvictUnmanaged: true},
			objs: []runtime.Object{kubeNode("w1", "worker", "10.0.0.21", ready), pod("default", "cache", "w1", "ReplicaSet", withEmptyDir),
				pod("default", "debug", "w1", "")}},
		{name: "disruption budget holds a ready node", remove: "w1", evict: evictPDB, opts: Options{Timeout: 50 * time.Millisecond},
			objs:    []runtime.Object{kubeNode("w1", "worker", "10.0.0.21", ready), pod("default", "web-1", "w1", "ReplicaSet")},
			wantErr: "The node is Ready", wantNode: true, wantPods: []string{"default/web-1"}},
		{name: "unknown node", remove: "w9", etcd: &fakeEtcd{members: []etcdmember.Member{m1, m2, m3}},
			wantErr: "no such node", wantMembers: []string{"m1", "m2", "m3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := testSite
			if tc.site != "" {
				yaml = tc.site
			}
			cs := clientset(tc.evict, tc.objs...)
			var out bytes.Buffer
			if tc.opts.LeaveTimeout == 0 {
				tc.opts.LeaveTimeout = 50 * time.Millisecond
			}
			r := &Remover{Site: parseSite(t, yaml), Kube: cs, Options: tc.opts, PollInterval: 5 * time.Millisecond,
				RetryBound: 100 * time.Millisecond,                 // a dead member's refusal is asked again within it
				Now:        func() time.Time { return time.Now() }, // the wait's bound is real; the marks' times are made stable below
				Log:        func(format string, args ...any) { fmt.Fprintf(&out, format+"\n", args...) }}
			var stopped []string
			if tc.nodeAnswers {
				w := &leave.Watcher{Kube: cs, Node: tc.remove, Root: t.TempDir(), Interval: 5 * time.Millisecond,
					Sys:     runFunc(func(name string, args ...string) { stopped = append(stopped, name+" "+strings.Join(args, " ")) }),
					Console: func(string, ...any) {}}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				go w.Run(ctx)
			}
			if tc.etcd != nil {
				r.Etcd = tc.etcd
			} else {
				r.EtcdErr = errors.New("etcd at https://10.0.0.11:2379: connection refused")
			}
			err := r.Remove(context.Background(), tc.remove)
			if err != nil {
				fmt.Fprintf(&out, "error: %v\n", err)
			}
			golden.Check(t, filepath.Join("testdata", "remove", strings.ReplaceAll(tc.name, " ", "-")+".txt"), stable(out.Bytes()))

			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Remove: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Remove: %v, want an error with %q", err, tc.wantErr)
			}
			var refusal *etcdmember.Refusal
			if got := errors.As(err, &refusal); got != tc.wantRefusal {
				t.Errorf("refused: %v, want %v (%v)", got, tc.wantRefusal, err)
			}
			if errors.Is(err, ErrUnknownNode) != (tc.remove == "w9") {
				t.Errorf("ErrUnknownNode: %v", err)
			}
			n, getErr := cs.CoreV1().Nodes().Get(context.Background(), tc.remove, metav1.GetOptions{})
			if tc.wantNode != (getErr == nil) {
				t.Errorf("Node %s there: %v, want %v", tc.remove, getErr == nil, tc.wantNode)
			}
			if getErr != nil && !apierrors.IsNotFound(getErr) {
				t.Fatal(getErr)
			}
			if tc.wantRefusal && n != nil && n.Spec.Unschedulable {
				t.Errorf("a refused removal cordoned %s", tc.remove)
			}
			if e, listed := listedRemoved(t, cs, tc.remove); listed != (err == nil) {
				t.Errorf("%s listed removed: %v (%s), want %v", tc.remove, listed, e, err == nil)
			}
			if tc.etcd != nil && !slices.Equal(tc.etcd.names(), tc.wantMembers) {
				t.Errorf("etcd members %v, want %v", tc.etcd.names(), tc.wantMembers)
			}
			if tc.nodeAnswers && !slices.Equal(stopped, []string{"systemctl stop kubelet.service kubepods.slice"}) {
				t.Errorf("the node ran %v, want its kubelet and pods stopped", stopped)
			}
			if got := podNames(t, cs); !slices.Equal(got, tc.wantPods) {
				t.Errorf("pods left %v, want %v", got, tc.wantPods)
			}
		})
	}
}

// stable takes the measured durations and the marks' times out of a
// removal's output.
func stable(out []byte) []byte {
	out = regexp.MustCompile(`: after [0-9.]+[mµn]?s\n`).ReplaceAll(out, []byte(": after (time)\n"))
	return regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`).ReplaceAll(out, []byte("(time)"))
}

type runFunc func(name string, args ...string)

func (f runFunc) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	f(name, args...)
	return nil, nil
}

// A second run of an interrupted removal finishes it: the first is cut
// off by its context in the drain, the second does the rest.
func TestRemoveResumesAnInterruptedRun(t *testing.T) {
	cs := clientset(evictPDB, kubeNode("m2", "master", "10.0.0.12", corev1.ConditionTrue), pod("default", "web", "m2", "ReplicaSet"))
	e := &fakeEtcd{members: []etcdmember.Member{m1, m2, m3}}
	var out bytes.Buffer
	r := &Remover{Site: parseSite(t, testSite), Kube: cs, Etcd: e, Options: Options{LeaveTimeout: 50 * time.Millisecond}, PollInterval: 5 * time.Millisecond, Log: func(format string, args ...any) { fmt.Fprintf(&out, format+"\n", args...) }}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := r.Remove(ctx, "m2"); err == nil || !strings.Contains(err.Error(), "drain") {
		t.Fatalf("first run: %v, want the drain cut off", err)
	}
	if n, _ := cs.CoreV1().Nodes().Get(context.Background(), "m2", metav1.GetOptions{}); n == nil || !n.Spec.Unschedulable {
		t.Fatalf("first run did not cordon m2")
	}
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		return true, nil, cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "default", "web")
	}) // the budget allows it now
	out.Reset()
	if err := r.Remove(context.Background(), "m2"); err != nil {
		t.Fatalf("second run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"Node m2 was already cordoned", "evicted default/web", "removed etcd member a2", "deleted Node m2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("second run does not say %q:\n%s", want, out.String())
		}
	}
}

// removedList is the removed-nodes ConfigMap with data.
func removedList(data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: removednodes.Name, Namespace: removednodes.Namespace}, Data: data}
}

// listedRemoved is node's removed-nodes entry, if there is one.
func listedRemoved(t *testing.T, kube kubernetes.Interface, node string) (removednodes.Entry, bool) {
	t.Helper()
	l, err := removednodes.Read(context.Background(), kube)
	if err != nil {
		t.Fatal(err)
	}
	e, ok := l[node]
	return e, ok
}
