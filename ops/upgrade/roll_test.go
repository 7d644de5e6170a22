package upgrade

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kiln-project/kiln/contract/imagemanifest"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/upgradeask"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/node/etcdmember"
	"github.com/kiln-project/kiln/node/healthgate"
	"github.com/kiln-project/kiln/ops/nodeops"
)

// rollTarget is a build whose digests an ask can carry (64 hex digits).
var (
	rollTarget = imagemanifest.Versions{Kubernetes: "v1.37.1", Etcd: "v3.6.5", KilnSHA256: strings.Repeat("05", 32)}
	rollAsk    = upgradeask.Ask{KilnSHA256: rollTarget.KilnSHA256, Kubernetes: rollTarget.Kubernetes, URL: "http://10.0.0.1:8080/images/node",
		Artifacts: upgradeask.Artifacts{Kernel: strings.Repeat("1a", 32), Initrd: strings.Repeat("2b", 32), Rootfs: strings.Repeat("3c", 32)}}
	onTarget = image{"v1.37.1", "3.6.5", "v1.0.0", rollTarget.KilnSHA256}
)

// answer is how a simulated node answers an ask.
type answer int

const (
	rolls        answer = iota // stages, reboots, comes back Ready with its role done on the new boot
	rollsBack                  // stages, reboots, comes back on its old slot and says so
	silent                     // never answers
	failsStage                 // says it could not stage
	noRole                     // stages and reboots, but its role never finishes
	garbles                    // answers with a malformed staged annotation
	stagedBefore               // staged for an earlier run on this boot: does not answer again, reboots
	oldImage                   // stages, reboots, comes back Ready on its old image without saying why
)

// fakeNodes simulates the node side of the protocol behind a fake
// clientset: a reactor on Node patches notes each ask, and a reactor on
// Node gets moves an asked node one state on per read (staged, then a
// new boot, then Ready with its role done and the target published).
type fakeNodes struct {
	kube    *fake.Clientset
	etcd    *fakeEtcd
	answers map[string]answer
	asked   []string // node names, in the order asked
	request map[string]string
	state   map[string]int
}

func newFakeNodes(t *testing.T, c fakeCluster, answers map[string]answer) *fakeNodes {
	f := &fakeNodes{kube: fake.NewClientset(c.objs...), etcd: c.etcd, answers: answers, request: map[string]string{}, state: map[string]int{}}
	f.kube.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchAction)
		if !bytes.Contains(p.GetPatch(), []byte(upgradeask.AskAnnotation)) {
			return false, nil, nil
		}
		f.asked = append(f.asked, p.GetName())
		return false, nil, nil
	})
	f.kube.PrependReactor("get", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.step(t, a.(k8stesting.GetAction).GetName())
		return false, nil, nil
	})
	return f
}

// step moves node name one state on once the rollout asked it.
func (f *fakeNodes) step(t *testing.T, name string) {
	obj, err := f.kube.Tracker().Get(corev1.SchemeGroupVersion.WithResource("nodes"), "", name)
	if err != nil {
		return
	}
	n := obj.(*corev1.Node).DeepCopy()
	v, ok := n.Annotations[upgradeask.AskAnnotation]
	if !ok || !slices.Contains(f.asked, name) {
		return
	}
	ask, err := upgradeask.DecodeAsk(v)
	if err != nil {
		t.Errorf("node %s cannot read its ask: %v", name, err)
		return
	}
	if f.request[name] != ask.Request {
		f.request[name], f.state[name] = ask.Request, 0
	}
	how := f.answers[name]
	switch f.state[name] {
	case 0:
		f.stage(n, ask, how)
	case 1:
		f.reboot(n, ask, how)
	case 2:
		f.serve(n, ask, how)
	}
	f.state[name]++
	if err := f.kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), n, ""); err != nil {
		t.Error(err)
	}
}

func (f *fakeNodes) stage(n *corev1.Node, ask upgradeask.Ask, how answer) {
	switch how {
	case silent, stagedBefore:
	case failsStage:
		n.Annotations[upgradeask.FailedAnnotation], _ = upgradeask.Failed{Request: ask.Request, Reason: "rootfs.squashfs: sha256 ffee..., the ask says 3c3c..."}.Encode()
	case garbles:
		n.Annotations[upgradeask.StagedAnnotation] = "Staged!"
	default:
		n.Annotations[upgradeask.StagedAnnotation] = ask.Request
	}
}

func (f *fakeNodes) reboot(n *corev1.Node, ask upgradeask.Ask, how answer) {
	if how == silent || how == failsStage {
		return
	}
	n.Status.NodeInfo.BootID = "boot-" + n.Name + "-2"
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, LastHeartbeatTime: metav1.Now()}}
}

// serve brings the node back: Ready on its new boot, or, rolling back,
// on a third boot (its old slot's) that says so.
func (f *fakeNodes) serve(n *corev1.Node, ask upgradeask.Ask, how answer) {
	if how == rollsBack {
		n.Status.NodeInfo.BootID = "boot-" + n.Name + "-3"
		n.Annotations[upgradeask.RolledBackAnnotation], _ = upgradeask.RolledBack{Request: ask.Request, From: "b", To: "a",
			Reason: "health gate: apiserver not ready after 5m0s"}.Encode()
	}
	if how != rolls && how != noRole && how != stagedBefore && how != oldImage {
		return
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	if how == noRole {
		return
	}
	n.Annotations[nodefile.RoleDoneAnnotation] = n.Status.NodeInfo.BootID
	if how == oldImage {
		return
	}
	n.Annotations[nodefile.KilnDigestAnnotation] = ask.KilnSHA256
	n.Status.NodeInfo.KubeletVersion = ask.Kubernetes
	if n.Name[0] == 'm' {
		f.etcd.releases[etcdmember.ClientURL(addrs[n.Name])] = "3.6.5"
	}
}

func (f *fakeNodes) node(t *testing.T, name string) *corev1.Node {
	obj, err := f.kube.Tracker().Get(corev1.SchemeGroupVersion.WithResource("nodes"), "", name)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*corev1.Node)
}

// tries is a Waiter that tries its check a few times without sleeping,
// as retry.Wait would within its bound, and records what each wait said
// it waits for.
type tries struct{ waits []string }

func (w *tries) Wait(ctx context.Context, what string, bound time.Duration, _ retry.Logf, check func(context.Context) error) error {
	w.waits = append(w.waits, what)
	var last error
	for range 5 {
		if last = check(ctx); last == nil || errors.Is(last, retry.ErrFinal) {
			break
		}
	}
	switch {
	case last == nil:
		return nil
	case errors.Is(last, retry.ErrFinal):
		return fmt.Errorf("%s: %w", what, last)
	}
	return fmt.Errorf("%s: gave up after %s: %w", what, bound, last)
}

// minutes is a Clock a minute on at every reading.
type minutes struct{ t time.Time }

func (c *minutes) Now() time.Time {
	c.t = c.t.Add(time.Minute)
	return c.t
}

// The rollout against simulated nodes: each case's answers, what it
// asked in order, the progress lines it printed, its error, and the
// workers' cordons.
func TestRoll(t *testing.T) {
	ready := corev1.ConditionTrue
	unmanaged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "lonely"}, Spec: corev1.PodSpec{NodeName: "w1"}}
	for _, tc := range []struct {
		name    string
		cluster fakeCluster
		answers map[string]answer
		// before changes the cluster after the plan, before the rollout.
		before   func(*testing.T, *fakeNodes)
		asked    string
		lines    []string
		err      []string // substrings; none: the rollout succeeds
		rollback bool     // the error carries the node's upgradeask.RolledBack
		cordoned string   // the workers left cordoned
	}{
		{name: "every node rolls: masters one at a time, then workers cordoned, drained and uncordoned", cluster: all(old),
			asked: "m1 m2 m3 w1 w2",
			lines: []string{"[1/5] m1: asked to stage kiln sha256:050505050505, Kubernetes v1.37.1, and reboot (request ", "[1/5] m1: staged",
				"[1/5] m1: rebooted", "[1/5] m1: passed the health gate in 1m0s", "[4/5] w1: cordoned Node w1", "[4/5] w1: no pod on w1 to evict",
				"[4/5] w1: uncordoned Node w1", "every node of the site runs kiln sha256:050505050505, Kubernetes v1.37.1"}},
		{name: "a re-run resumes: nodes on the target are not asked", asked: "m3 w2",
			cluster: fakeCluster{}.with("m1", onTarget, ready).with("w1", onTarget, ready).with("m2", onTarget, ready).with("m3", old, ready).with("w2", old, ready),
			lines:   []string{"[1/2] m3: staged", "[2/2] w2: passed the health gate"}},
		{name: "a re-run on the same boot takes the answer the node gave the first run", cluster: all(old),
			answers: map[string]answer{"m1": stagedBefore},
			before: func(t *testing.T, f *fakeNodes) {
				n := f.node(t, "m1").DeepCopy()
				n.Annotations[upgradeask.StagedAnnotation] = requestID("m1", "boot-m1", rollAsk)
				f.kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), n, "")
			},
			asked: "m1 m2 m3 w1 w2", lines: []string{"[1/5] m1: staged", "[1/5] m1: passed the health gate"}},
		{name: "a re-run uncordons a worker on the target an earlier run left cordoned", asked: "w2",
			cluster: fakeCluster{}.with("m1", onTarget, ready).with("w1", onTarget, ready).with("m2", onTarget, ready).with("m3", onTarget, ready).with("w2", old, ready),
			before: func(t *testing.T, f *fakeNodes) {
				n := f.node(t, "w1").DeepCopy()
				n.Spec.Unschedulable = true
				a := rollAsk
				a.Request = "0123456789abcdef"
				n.Annotations[upgradeask.AskAnnotation], _ = a.Encode()
				f.kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), n, "")
			},
			lines: []string{"w1: on the target image, still cordoned by an earlier run", "uncordoned Node w1", "[1/1] w2: passed the health gate"}},
		{name: "a rollback stops the rollout with its reason", cluster: all(old), answers: map[string]answer{"m2": rollsBack},
			asked: "m1 m2", lines: []string{"[1/5] m1: passed the health gate", "[2/5] m2: staged", "[2/5] m2: rebooted"},
			rollback: true,
			err: []string{"stopped at node m2 (2 of 5", "health gate: m2 to pass the health gate on its new boot", "m2 answered request",
				"kiln: rolled back from b to a: health gate: apiserver not ready after 5m0s"}},
		{name: "a node that never says staged times out, naming what it waited for", cluster: all(old), answers: map[string]answer{"m1": silent},
			asked: "m1", err: []string{"at node m1", "staged: m1 to stage the build of request", "(kiln.dev/upgrade-staged): gave up after 15m0s: not staged yet"}},
		{name: "a node that cannot stage says why", cluster: all(old), answers: map[string]answer{"m1": failsStage},
			asked: "m1", err: []string{"at node m1", "staging failed: rootfs.squashfs: sha256 ffee..."}},
		{name: "a node whose role never finishes does not pass the gate", cluster: all(old), answers: map[string]answer{"m1": noRole},
			asked: "m1", lines: []string{"[1/5] m1: rebooted"},
			err: []string{"gave up after 15m0s: node m1 has not passed the health gate: role: the genesis role is not done on any boot"}},
		{name: "a node back on its old image has not rolled", cluster: all(old), answers: map[string]answer{"m1": oldImage},
			asked: "m1", lines: []string{"[1/5] m1: rebooted"},
			err: []string{"at node m1", "m1 passed the health gate but runs kiln sha256:", "not the target's sha256:"}},
		{name: "a malformed answer stops the rollout", cluster: all(old), answers: map[string]answer{"m1": garbles},
			asked: "m1", err: []string{"at node m1", `kiln.dev/upgrade-staged: malformed upgrade annotation: request "Staged!"`}},
		{name: "quorum lost since the plan: refused at the re-check, naming the member", cluster: all(old),
			before: func(t *testing.T, f *fakeNodes) { f.etcd.down[etcdmember.ClientURL(addrs["m3"])] = true },
			err:    []string{"at node m1", "m1's pre-checks, read again just before it, refuse it", "quorum: etcd would lose quorum while member a0 (m1, https://10.0.0.11:2380) is down"}},
		{name: "a worker whose drain is refused stays cordoned; the next is untouched", cluster: all(old),
			before: func(t *testing.T, f *fakeNodes) { f.kube.Tracker().Add(unmanaged) },
			asked:  "m1 m2 m3", cordoned: "w1",
			err: []string{"at node w1 (4 of 5", "drain: nothing evicted, these pods on w1 cannot be: default/lonely", "w1 may stay cordoned: kubectl uncordon w1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := site.Parse("site.yaml", []byte(threeMasters))
			if err != nil {
				t.Fatal(err)
			}
			f := newFakeNodes(t, tc.cluster, tc.answers)
			p := &Planner{Site: s, Kube: f.kube, Etcd: f.etcd, Target: rollTarget}
			plan, err := p.Plan(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if tc.before != nil {
				tc.before(t, f)
			}
			var out strings.Builder
			w := &tries{}
			r := &Roller{Planner: p, Ask: rollAsk, Wait: w, Clock: &minutes{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
				Gate:    healthgate.Gate{Kube: f.kube, Etcd: f.etcd, APIServer: healthgate.APIServerFunc(func(context.Context, string) error { return nil })},
				Drainer: nodeops.Drainer{Kube: f.kube}, Log: func(format string, args ...any) { fmt.Fprintf(&out, format+"\n", args...) }}
			err = r.Run(context.Background(), plan)
			if got := strings.Join(f.asked, " "); got != tc.asked {
				t.Errorf("asked %q, want %q", got, tc.asked)
			}
			for _, l := range tc.lines {
				if !strings.Contains(out.String(), l) {
					t.Errorf("progress lacks %q:\n%s", l, out.String())
				}
			}
			switch {
			case len(tc.err) == 0 && err != nil:
				t.Errorf("Run: %v\n%s", err, out.String())
			case len(tc.err) > 0 && !errors.Is(err, ErrStopped):
				t.Errorf("Run = %v, want %v", err, ErrStopped)
			}
			for _, e := range tc.err {
				if err != nil && !strings.Contains(err.Error(), e) {
					t.Errorf("error lacks %q:\n%v", e, err)
				}
			}
			var rb *upgradeask.RolledBack
			if errors.As(err, &rb) != tc.rollback {
				t.Errorf("the error carries a rollback: %v, want %v", !tc.rollback, tc.rollback)
			}
			var cordoned []string
			for _, w := range []string{"w1", "w2"} {
				if f.node(t, w).Spec.Unschedulable {
					cordoned = append(cordoned, w)
				}
			}
			if got := strings.Join(cordoned, " "); got != tc.cordoned {
				t.Errorf("cordoned %q, want %q", got, tc.cordoned)
			}
			for _, what := range w.waits {
				if !strings.Contains(what, " to ") {
					t.Errorf("a wait that does not say what it waits for: %q", what)
				}
			}
		})
	}
}
