package role

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// fakeEtcd is the cluster's etcd as the join sees it: a member list, a
// learner that starts after startAfter member lists (never when < 0),
// and promotions that fail notInSync times first.
type fakeEtcd struct {
	members    []member
	nextID     uint64
	startAfter int
	notInSync  int
	unhealthy  map[string]bool // client URLs that do not answer
	calls      []string
	lists      int
}

func (f *fakeEtcd) MemberList(context.Context) ([]member, error) {
	f.lists++
	for i, m := range f.members {
		if m.Name == "" && f.startAfter >= 0 && f.lists > f.startAfter {
			f.members[i].Name = "m2"
		}
	}
	return slices.Clone(f.members), nil
}

func (f *fakeEtcd) AddLearner(_ context.Context, peerURL string) (uint64, []member, error) {
	f.calls = append(f.calls, "add "+peerURL)
	for _, m := range f.members {
		if m.IsLearner {
			return 0, nil, errors.New("etcdserver: too many learner members in cluster")
		}
	}
	f.nextID++
	f.members = append(f.members, member{ID: f.nextID, PeerURLs: []string{peerURL}, IsLearner: true})
	return f.nextID, slices.Clone(f.members), nil
}

func (f *fakeEtcd) Promote(_ context.Context, id uint64) error {
	f.calls = append(f.calls, fmt.Sprintf("promote %x", id))
	if f.notInSync > 0 {
		f.notInSync--
		return errors.New("etcdserver: can only promote a learner member which is in sync with leader")
	}
	for i := range f.members {
		if f.members[i].ID == id {
			f.members[i].IsLearner = false
		}
	}
	return nil
}

func (f *fakeEtcd) Remove(_ context.Context, id uint64) error {
	f.calls = append(f.calls, fmt.Sprintf("remove %x", id))
	f.members = slices.DeleteFunc(f.members, func(m member) bool { return m.ID == id })
	return nil
}

func (f *fakeEtcd) Healthy(_ context.Context, u string) error {
	if f.unhealthy[u] {
		return errors.New("context deadline exceeded")
	}
	return nil
}

func (f *fakeEtcd) Close() error { return nil }

const (
	m1Peer = "https://10.0.2.50:2380"
	m2Peer = "https://10.0.2.51:2380" // the joining node, m2 of testSite
)

var m1 = member{ID: 0xa1, Name: "g1", PeerURLs: []string{m1Peer}, ClientURLs: []string{"https://10.0.2.50:2379"}}

func TestJoinEtcd(t *testing.T) {
	for _, tc := range []struct {
		name      string
		etcd      *fakeEtcd
		data      bool // m2 has an etcd data directory
		wantCalls []string
		wantErr   string
		wantPeers string // the recorded initial cluster
	}{
		{name: "a new learner is added, started and promoted after catching up",
			etcd:      &fakeEtcd{members: []member{m1}, nextID: 0xb0, startAfter: 2, notInSync: 2},
			wantCalls: []string{"add " + m2Peer, "promote b1", "promote b1", "promote b1"},
			wantPeers: "g1=" + m1Peer + ",m2=" + m2Peer},
		{name: "an unstarted learner with this node's peer URL is reused, not added twice",
			etcd:      &fakeEtcd{members: []member{m1, {ID: 0xb7, PeerURLs: []string{m2Peer}, IsLearner: true}}, startAfter: 1},
			wantCalls: []string{"promote b7"},
			wantPeers: "g1=" + m1Peer + ",m2=" + m2Peer},
		{name: "a stale member of this node (re-imaged, no data) is removed when quorum survives",
			etcd: &fakeEtcd{members: []member{m1, {ID: 0xb7, Name: "m2", PeerURLs: []string{m2Peer}, ClientURLs: []string{"https://10.0.2.51:2379"}},
				{ID: 0xc3, Name: "m3", PeerURLs: []string{"https://10.0.2.53:2380"}, ClientURLs: []string{"https://10.0.2.53:2379"}}},
				nextID: 0xd0, startAfter: 1},
			wantCalls: []string{"remove b7", "add " + m2Peer, "promote d1"},
			wantPeers: "g1=" + m1Peer + ",m2=" + m2Peer + ",m3=https://10.0.2.53:2380"},
		{name: "a stale voting member is not removed without quorum",
			etcd: &fakeEtcd{members: []member{m1, {ID: 0xb7, Name: "m2", PeerURLs: []string{m2Peer}, ClientURLs: []string{"https://10.0.2.51:2379"}}},
				unhealthy: map[string]bool{"https://10.0.2.50:2379": true}},
			wantErr: "etcd member b7 (m2, [https://10.0.2.51:2380]) is registered for this node, which has no etcd data (re-imaged?); removing it needs quorum, and only 0 of 2 voting members answer (need 2)"},
		{name: "this node's own member with its data resumes",
			etcd:      &fakeEtcd{members: []member{m1, {ID: 0xb7, Name: "m2", PeerURLs: []string{m2Peer}}}},
			data:      true,
			wantCalls: []string{"promote b7"},
			wantPeers: "g1=" + m1Peer + ",m2=" + m2Peer},
		{name: "a learner that never starts is removed again and its files moved aside",
			etcd:      &fakeEtcd{members: []member{m1}, nextID: 0xb0, startAfter: -1},
			wantCalls: []string{"add " + m2Peer, "remove b1"},
			wantErr:   "removed learner b1 and moved its manifest and data aside: the next boot tries again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := nodeRoot(t, "m2")
			n := &Node{Root: root, Sys: &recorder{}, Wait: time.Second, Log: t.Logf}
			n.file, n.cat = mustLoad(t, n)
			if tc.data {
				os.MkdirAll(filepath.Join(root, manifests.EtcdDataDir, "member/snap"), 0o700)
			}
			err := joinWithin(t, n, tc.etcd)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(tc.etcd.calls, tc.wantCalls) {
				t.Errorf("etcd calls %q, want %q", tc.etcd.calls, tc.wantCalls)
			}
			rec, recErr := etcdmember.Read(root)
			if tc.wantPeers == "" {
				if recErr == nil {
					t.Errorf("a failed join left a membership record: %+v", rec)
				}
				return
			}
			if recErr != nil || rec.InitialCluster() != tc.wantPeers || rec.State != etcdmember.StateExisting {
				t.Errorf("record %+v (%v), want peers %s, existing", rec, recErr, tc.wantPeers)
			}
			conf, _ := os.ReadFile(filepath.Join(root, manifests.EtcdConfigPath))
			if !strings.Contains(string(conf), "initial-cluster-state: existing") || !strings.Contains(string(conf), "initial-cluster: "+tc.wantPeers) {
				t.Errorf("etcd configuration:\n%s", conf)
			}
			if _, err := os.Stat(filepath.Join(root, manifests.StaticPodDir, "etcd.yaml")); err != nil {
				t.Errorf("etcd static pod: %v", err)
			}
			if _, err := os.Stat(filepath.Join(root, manifests.StaticPodDir, "kube-apiserver.yaml")); err == nil {
				t.Error("the apiserver was written before the join ended")
			}
		})
	}
}

// joinWithin runs the join with short bounds: the fake answers at once.
func joinWithin(t *testing.T, n *Node, c etcdCluster) error {
	n.joinBounds = joinBounds{learnerStart: 7 * time.Second, promote: 9 * time.Second}
	return n.units().join.etcd.join(context.Background(), c)
}
