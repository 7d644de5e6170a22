package nodeops

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kiln-project/kiln/internal/golden"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// electingEtcd is etcd once the removed member led: the member list
// fails listFails times after the removal, while the rest elect a leader.
type electingEtcd struct {
	*fakeEtcd
	removed   bool
	listFails int
}

func (e *electingEtcd) Remove(ctx context.Context, id uint64) error {
	err := e.fakeEtcd.Remove(ctx, id)
	e.removed = err == nil
	return err
}

func (e *electingEtcd) MemberList(ctx context.Context) ([]etcdmember.Member, error) {
	if e.removed && e.listFails > 0 {
		e.listFails--
		return nil, errors.New("etcd member list at https://10.0.0.11:2379: etcdserver: leader changed")
	}
	return e.fakeEtcd.MemberList(ctx)
}

// leaderFailure is the apiserver's answer to a write while its etcd has
// no leader, as a removal gets it while etcd elects one.
func leaderFailure() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError,
		Message: "etcdserver: request timed out, possibly due to previous leader failure"}}
}

// Removing the etcd member that led (m2 of two masters) leaves the other
// without a leader for a moment: the steps after it try again through
// the election and the removal finishes; an answer no retry changes
// (forbidden) fails the step at once.
func TestRemoveRidesOutALeaderElection(t *testing.T) {
	for _, tc := range []struct {
		name      string
		patchErr  func() error
		patchFail int
		listFails int
		wantErr   string
	}{
		{name: "leader election", patchErr: leaderFailure, patchFail: 2, listFails: 1},
		{name: "forbidden is not retried", patchErr: func() error {
			return apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "m2", errors.New("RBAC: not allowed"))
		}, patchFail: 1, wantErr: "mark-removed: marking Node m2 removed: nodes \"m2\" is forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := clientset("", kubeNode("m2", "master", "10.0.0.12", corev1.ConditionTrue))
			fails := tc.patchFail
			cs.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if fails == 0 || !strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), "kiln.dev/removed") {
					return false, nil, nil
				}
				fails--
				return true, nil, tc.patchErr()
			})
			e := &electingEtcd{fakeEtcd: &fakeEtcd{members: []etcdmember.Member{m1, m2}}, listFails: tc.listFails}
			var out bytes.Buffer
			r := &Remover{Site: parseSite(t, twoMasterSite), Kube: cs, Etcd: e, PollInterval: time.Millisecond,
				Options: Options{LeaveTimeout: 20 * time.Millisecond}, RetryBound: 10 * time.Second,
				Log: func(format string, args ...any) { fmt.Fprintf(&out, format+"\n", args...) }}
			err := r.Remove(context.Background(), "m2")
			if err != nil {
				fmt.Fprintf(&out, "error: %v\n", err)
			}
			golden.Check(t, filepath.Join("testdata", "remove", "retry-"+strings.ReplaceAll(tc.name, " ", "-")+".txt"), stable(out.Bytes()))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Remove: %v\n%s", err, out.String())
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Remove: %v, want an error with %q", err, tc.wantErr)
			}
			if fails != 0 {
				t.Errorf("%d failing patch(es) never tried", fails)
			}
			if !slices.Equal(e.names(), []string{"m1"}) {
				t.Errorf("etcd members %v, want m1 alone", e.names())
			}
			_, getErr := cs.CoreV1().Nodes().Get(context.Background(), "m2", metav1.GetOptions{})
			if gone := apierrors.IsNotFound(getErr); gone != (tc.wantErr == "") {
				t.Errorf("Node m2 gone: %v (%v)", gone, getErr)
			}
		})
	}
}

// A retry that never ends is bounded: the step fails with the last
// answer once the bound passes.
func TestRemoveRetryIsBounded(t *testing.T) {
	cs := clientset("", kubeNode("w1", "worker", "10.0.0.21", corev1.ConditionTrue))
	cs.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, leaderFailure() })
	r := &Remover{Site: parseSite(t, testSite), Kube: cs, PollInterval: time.Millisecond, RetryBound: 30 * time.Millisecond,
		EtcdErr: errors.New("not needed for a worker"), Log: func(string, ...any) {}}
	start := time.Now()
	err := r.Remove(context.Background(), "w1")
	if err == nil || !strings.Contains(err.Error(), "cordon: cordoning Node w1: etcdserver: request timed out") {
		t.Fatalf("Remove: %v, want the cordon's last answer", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the retry took %s, bound 30ms", d)
	}
}

func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"etcd without a leader, through the apiserver", leaderFailure(), true},
		{"apiserver timeout", apierrors.NewTimeoutError("request did not complete", 1), true},
		{"service unavailable", apierrors.NewServiceUnavailable("starting"), true},
		{"connection refused", fmt.Errorf("patch: %w", syscall.ECONNREFUSED), true},
		{"etcd leader changed", errors.New("etcd member list at https://10.0.0.11:2379: etcdserver: leader changed"), true},
		{"etcd call bound", fmt.Errorf("etcd member list: %w", context.DeadlineExceeded), true},
		{"not found", apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "m2"), false},
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "m2", errors.New("no")), false},
		{"disruption budget", apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10), false},
		{"refusal", &etcdmember.Refusal{Why: "m1 is the cluster's last master", WayOut: "add a master first"}, false},
		{"refusal on members that did not answer", fmt.Errorf("check: %w", &etcdmember.Refusal{Why: "it would leave etcd without quorum", WayOut: "bring m3 back first", Unanswered: true}), true},
		{"nil", nil, false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("%s: transient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// slowEtcd is a fakeEtcd whose member at slowURL misses its first
// misses status calls, as a starved machine's etcd misses the 5 s bound.
type slowEtcd struct {
	*fakeEtcd
	slowURL string
	misses  int
}

func (s *slowEtcd) Healthy(ctx context.Context, clientURL string) error {
	if clientURL == s.slowURL && s.misses > 0 {
		s.misses--
		return fmt.Errorf("%s: context deadline exceeded", clientURL)
	}
	return s.fakeEtcd.Healthy(ctx, clientURL)
}

// A quorum refusal that rests on a member that did not answer is asked
// again within the bound: a member that answers then lets the removal
// go on (a starved machine's etcd can miss one status call).
func TestRemoveAsksASlowMemberAgain(t *testing.T) {
	cs := clientset("", kubeNode("m2", "master", "10.0.0.12", corev1.ConditionTrue))
	e := &slowEtcd{fakeEtcd: &fakeEtcd{members: []etcdmember.Member{m1, m2}}, slowURL: m1.ClientURLs[0], misses: 2}
	var out bytes.Buffer
	r := &Remover{Site: parseSite(t, twoMasterSite), Kube: cs, Etcd: e, PollInterval: time.Millisecond,
		Options: Options{LeaveTimeout: 20 * time.Millisecond}, RetryBound: 10 * time.Second,
		Log: func(format string, args ...any) { fmt.Fprintf(&out, format+"\n", args...) }}
	if err := r.Remove(context.Background(), "m2"); err != nil {
		t.Fatalf("Remove: %v\n%s", err, out.String())
	}
	if e.misses != 0 {
		t.Errorf("m1's status was asked %d time(s) fewer than it missed", e.misses)
	}
	if !strings.Contains(out.String(), "check: refusing: etcd has no quorum: 1 of 2 voting members answer (not answering: m1)") ||
		!strings.Contains(out.String(), "trying again for up to 10s") {
		t.Errorf("the removal did not say it asked again:\n%s", out.String())
	}
	if names := e.names(); !slices.Equal(names, []string{"m1"}) {
		t.Errorf("etcd members %v, want m1 alone", names)
	}
}

// clientTimeout is the error client-go returns when an apiserver does not
// answer within the client's timeout.
type clientTimeout struct{}

func (clientTimeout) Error() string {
	return "net/http: request canceled (Client.Timeout exceeded while awaiting headers)"
}
func (clientTimeout) Timeout() bool   { return true }
func (clientTimeout) Temporary() bool { return true }

// Reading the Node to remove is tried again while the apiserver does not
// answer in time, as a master busy starting its controllers may not.
func TestRemoveRetriesFindingTheNode(t *testing.T) {
	cs := clientset("", kubeNode("w1", "worker", "10.0.0.21", corev1.ConditionTrue))
	fails, gets := 2, 0
	cs.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		if fails == 0 {
			return false, nil, nil
		}
		fails--
		return true, nil, &url.Error{Op: "Get", URL: "https://10.0.0.11:6443/api/v1/nodes/w1", Err: clientTimeout{}}
	})
	var log []string
	r := &Remover{Site: parseSite(t, testSite), Kube: cs, PollInterval: time.Millisecond, RetryBound: 10 * time.Second,
		Options: Options{LeaveTimeout: 20 * time.Millisecond}, EtcdErr: errors.New("not needed for a worker"),
		Log: func(format string, args ...any) { log = append(log, fmt.Sprintf(format, args...)) }}
	if err := r.Remove(context.Background(), "w1"); err != nil {
		t.Fatalf("Remove: %v\n%s", err, strings.Join(log, "\n"))
	}
	if fails != 0 || gets < 3 {
		t.Errorf("the Node read %d time(s), %d timeout(s) left", gets, fails)
	}
	if !slices.ContainsFunc(log, func(l string) bool {
		return strings.HasPrefix(l, "finding w1: ") && strings.Contains(l, "trying again")
	}) {
		t.Errorf("no line says the read is tried again:\n%s", strings.Join(log, "\n"))
	}
}
