package healthgate

import (
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

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// fakeEtcd is a member list; the members whose client URL is in down do
// not answer.
type fakeEtcd struct {
	members []etcdmember.Member
	down    map[string]bool
	listErr error
}

func (f fakeEtcd) MemberList(context.Context) ([]etcdmember.Member, error) {
	return f.members, f.listErr
}

func (f fakeEtcd) Healthy(_ context.Context, clientURL string) error {
	if f.down[clientURL] {
		return fmt.Errorf("%s: context deadline exceeded", clientURL)
	}
	return nil
}

func member(id uint64, name, addr string, learner bool) etcdmember.Member {
	return etcdmember.Member{ID: id, Name: name, PeerURLs: []string{etcdmember.PeerURL(addr)},
		ClientURLs: []string{etcdmember.ClientURL(addr)}, IsLearner: learner}
}

var (
	m1 = member(0xa1, "m1", "10.0.0.11", false)
	m2 = member(0xa2, "m2", "10.0.0.12", false)
	m3 = member(0xa3, "m3", "10.0.0.13", false)
)

const oldBoot, newBoot = "b-old", "b-new"

var (
	rebooted  = time.Date(2026, 12, 7, 11, 0, 0, 0, time.UTC)
	heartbeat = rebooted.Add(time.Minute)
)

// node is a Node at addr of boot bootID, Ready (or not) with its
// heartbeat at beat, its role done on doneOn ("" : not published).
func node(name, addr, bootID string, ready corev1.ConditionStatus, beat time.Time, doneOn string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if doneOn != "" {
		n.Annotations = map[string]string{nodefile.RoleDoneAnnotation: doneOn}
	}
	n.Status.NodeInfo.BootID = bootID
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastHeartbeatTime: metav1.NewTime(beat)}}
	return n
}

func apiserver(notReady ...string) APIServer {
	return APIServerFunc(func(_ context.Context, n string) error {
		if slices.Contains(notReady, n) {
			return errors.New("readyz: [-]etcd failed")
		}
		return nil
	})
}

// Every case names the conditions it leaves unmet; the gate must name
// exactly those, in its order (node, etcd, apiserver).
func TestGate(t *testing.T) {
	yes, no := corev1.ConditionTrue, corev1.ConditionFalse
	three := fakeEtcd{members: []etcdmember.Member{m1, m2, m3}}
	for _, tc := range []struct {
		name   string
		target Target
		objs   []runtime.Object
		etcd   fakeEtcd
		notAPI []string
		unmet  []string
		says   string // a part of the error
	}{
		{name: "a rebooted worker passes",
			target: Target{Node: "w1", Role: "worker", Boot: After(oldBoot), Since: rebooted, RoleDone: Published{}},
			objs:   []runtime.Object{node("w1", "10.0.0.21", newBoot, yes, heartbeat, newBoot)}},
		{name: "a worker not rebooted yet: its Ready is the old boot's",
			target: Target{Node: "w1", Role: "worker", Boot: After(oldBoot), RoleDone: Published{}},
			objs:   []runtime.Object{node("w1", "10.0.0.21", oldBoot, yes, heartbeat, oldBoot)},
			unmet:  []string{"boot", "ready", "role"}, says: "still reports boot b-old"},
		{name: "a rebooted worker NotReady",
			target: Target{Node: "w1", Role: "worker", Boot: After(oldBoot), RoleDone: Published{}},
			objs:   []runtime.Object{node("w1", "10.0.0.21", newBoot, no, heartbeat, newBoot)},
			unmet:  []string{"ready"}, says: "Ready=False"},
		{name: "a heartbeat from before the reboot does not count",
			target: Target{Node: "w1", Role: "worker", Boot: After(oldBoot), Since: rebooted, RoleDone: Published{}},
			objs:   []runtime.Object{node("w1", "10.0.0.21", newBoot, yes, rebooted.Add(-time.Hour), newBoot)},
			unmet:  []string{"ready"}},
		{name: "a role last done on the boot before",
			target: Target{Node: "w1", Role: "worker", Boot: After(oldBoot), RoleDone: Published{}},
			objs:   []runtime.Object{node("w1", "10.0.0.21", newBoot, yes, heartbeat, oldBoot)},
			unmet:  []string{"role"}, says: "last done on boot b-old, not on a boot after b-old"},
		{name: "a role never published",
			target: Target{Node: "w1", Role: "worker", Boot: After(oldBoot), RoleDone: Published{}},
			objs:   []runtime.Object{node("w1", "10.0.0.21", newBoot, yes, heartbeat, "")},
			unmet:  []string{"role"}},
		{name: "no Node",
			target: Target{Node: "w1", Role: "worker", Boot: After(oldBoot), RoleDone: Published{}},
			unmet:  []string{"ready"}, says: "no Node w1"},
		{name: "the agent on its own boot, role done",
			target: Target{Node: "w1", Role: "worker", Boot: ThisBoot(newBoot), RoleDone: Known(newBoot)},
			objs:   []runtime.Object{node("w1", "10.0.0.21", newBoot, yes, heartbeat, "")}},
		{name: "the agent before its role is done",
			target: Target{Node: "w1", Role: "worker", Boot: ThisBoot(newBoot), RoleDone: Known("")},
			objs:   []runtime.Object{node("w1", "10.0.0.21", newBoot, yes, heartbeat, "")},
			unmet:  []string{"role"}},
		{name: "the agent before its kubelet reported this boot",
			target: Target{Node: "w1", Role: "worker", Boot: ThisBoot(newBoot), RoleDone: Known(newBoot)},
			objs:   []runtime.Object{node("w1", "10.0.0.21", oldBoot, yes, heartbeat, "")},
			unmet:  []string{"boot", "ready"}, says: "not this boot b-new"},
		{name: "the agent whose status says its role was done on another boot",
			target: Target{Node: "w1", Role: "worker", Boot: ThisBoot(newBoot), RoleDone: Known(oldBoot)},
			objs:   []runtime.Object{node("w1", "10.0.0.21", newBoot, yes, heartbeat, "")},
			unmet:  []string{"role"}, says: "last done on boot b-old, not on this boot b-new"},
		{name: "a rebooted master passes",
			target: Target{Node: "m2", Role: "master", Boot: After(oldBoot), RoleDone: Published{}},
			objs:   []runtime.Object{node("m2", "10.0.0.12", newBoot, yes, heartbeat, newBoot)}, etcd: three},
		{name: "a master whose member is still a learner",
			target: Target{Node: "m2", Role: "master", Boot: After(oldBoot), RoleDone: Published{}},
			objs:   []runtime.Object{node("m2", "10.0.0.12", newBoot, yes, heartbeat, newBoot)},
			etcd:   fakeEtcd{members: []etcdmember.Member{m1, member(0xb2, "m2", "10.0.0.12", true), m3}},
			unmet:  []string{"etcd member"}, says: "is a learner"},
		{name: "a master without a member",
			target: Target{Node: "m2", Role: "master", Boot: After(oldBoot), RoleDone: Published{}},
			objs:   []runtime.Object{node("m2", "10.0.0.12", newBoot, yes, heartbeat, newBoot)},
			etcd:   fakeEtcd{members: []etcdmember.Member{m1, m3}},
			unmet:  []string{"etcd member"}, says: "m2 has no etcd member"},
		{name: "another voter does not answer",
			target: Target{Node: "m2", Role: "master", Boot: After(oldBoot), RoleDone: Published{}},
			objs:   []runtime.Object{node("m2", "10.0.0.12", newBoot, yes, heartbeat, newBoot)},
			etcd:   fakeEtcd{members: three.members, down: map[string]bool{m3.ClientURLs[0]: true}},
			unmet:  []string{"etcd health"}, says: "not answering: m3"},
		{name: "a master whose apiserver is not ready",
			target: Target{Node: "m2", Role: "master", Boot: After(oldBoot), RoleDone: Published{}},
			objs:   []runtime.Object{node("m2", "10.0.0.12", newBoot, yes, heartbeat, newBoot)}, etcd: three,
			notAPI: []string{"m2"}, unmet: []string{"apiserver"}, says: "m2's apiserver is not ready"},
		{name: "a master failing everything names everything",
			target: Target{Node: "m2", Role: "master", Boot: After(oldBoot), RoleDone: Published{}},
			objs:   []runtime.Object{node("m2", "10.0.0.12", oldBoot, no, heartbeat, oldBoot)},
			etcd:   fakeEtcd{members: []etcdmember.Member{m1, member(0xb2, "m2", "10.0.0.12", true), m3}, down: map[string]bool{m1.ClientURLs[0]: true}},
			notAPI: []string{"m2"}, unmet: []string{"boot", "ready", "role", "etcd member", "etcd health", "apiserver"}},
		{name: "etcd unreachable",
			target: Target{Node: "m2", Role: "master", Boot: After(oldBoot), RoleDone: Published{}},
			objs:   []runtime.Object{node("m2", "10.0.0.12", newBoot, yes, heartbeat, newBoot)},
			etcd:   fakeEtcd{listErr: errors.New("context deadline exceeded")},
			unmet:  []string{"etcd member"}, says: "etcd's member list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := Gate{Kube: fake.NewClientset(tc.objs...), Etcd: tc.etcd, APIServer: apiserver(tc.notAPI...)}
			err := g.Check(context.Background(), tc.target)
			if len(tc.unmet) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var u *Unmet
			if !errors.As(err, &u) {
				t.Fatalf("Check = %v, want an *Unmet", err)
			}
			if !slices.Equal(u.Names(), tc.unmet) {
				t.Errorf("unmet %v, want %v: %v", u.Names(), tc.unmet, err)
			}
			if !strings.Contains(err.Error(), "node "+tc.target.Node+" has not passed the health gate") || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not name the node or lacks %q", err, tc.says)
			}
		})
	}
}
