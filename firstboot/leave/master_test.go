package leave

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// fakeEtcd is a member list; members whose client URL is in down do not
// answer a status call.
type fakeEtcd struct {
	mu      sync.Mutex
	members []etcdmember.Member
	down    map[string]bool
	removed []uint64
}

func (f *fakeEtcd) MemberList(context.Context) ([]etcdmember.Member, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.members), nil
}

func (f *fakeEtcd) Remove(_ context.Context, id uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.IndexFunc(f.members, func(m etcdmember.Member) bool { return m.ID == id })
	if i < 0 {
		return fmt.Errorf("etcdserver: member not found")
	}
	f.members = slices.Delete(f.members, i, i+1)
	f.removed = append(f.removed, id)
	return nil
}

func (f *fakeEtcd) Healthy(_ context.Context, url string) error {
	if f.down[url] {
		return fmt.Errorf("%s: context deadline exceeded", url)
	}
	return nil
}

func (f *fakeEtcd) Close() error { return nil }

func voter(id uint64, name, addr string) etcdmember.Member {
	return etcdmember.Member{ID: id, Name: name, PeerURLs: []string{etcdmember.PeerURL(addr)}, ClientURLs: []string{etcdmember.ClientURL(addr)}}
}

var (
	m1 = voter(0xa1, "m1", "10.77.0.11")
	m2 = voter(0xa2, "m2", "10.77.0.12")
	m3 = voter(0xa3, "m3", "10.77.0.13")
)

// nodeReads answers the watcher's reads of Node m2 in turn: a Node with
// the given labels, or (nil) none; the last answer repeats.
func nodeReads(reads ...map[string]string) *fake.Clientset {
	cs := fake.NewClientset()
	var mu sync.Mutex
	i := 0
	cs.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		labels := reads[min(i, len(reads)-1)]
		i++
		if labels == nil {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "m2")
		}
		return true, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m2", Labels: labels}}, nil
	})
	return cs
}

var (
	master     = map[string]string{manifests.MasterLabel: "", "kiln.dev/role": "master"}
	unlabelled = map[string]string{"kiln.dev/role": "master"}
)

// A master removed through the API (Node deleted, or master label
// taken off, on two reads in a row) leaves in the order that keeps the
// quorum; anything else, or a leave the quorum rule refuses, changes
// nothing.
func TestMasterLeavesWhenRemovedThroughTheAPI(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reads     []map[string]string
		labelled  bool
		members   []etcdmember.Member
		down      []etcdmember.Member
		wantLeave bool
		wantSaid  string // on the console
	}{
		{name: "master label removed", reads: []map[string]string{unlabelled}, labelled: true,
			members: []etcdmember.Member{m1, m2, m3}, wantLeave: true, wantSaid: "Node m2 lost its label " + manifests.MasterLabel},
		{name: "Node deleted", reads: []map[string]string{nil}, labelled: true,
			members: []etcdmember.Member{m1, m2, m3}, wantLeave: true, wantSaid: "Node m2 was deleted"},
		{name: "Node deleted, then registered again by the kubelet (no master label)", reads: []map[string]string{nil, unlabelled}, labelled: true,
			members: []etcdmember.Member{m1, m2}, wantLeave: true, wantSaid: "lost its label"},
		{name: "member already removed (by kiln node remove)", reads: []map[string]string{nil}, labelled: true,
			members: []etcdmember.Member{m1, m3}, wantLeave: true, wantSaid: "already removed"},
		{name: "label off for one read only", reads: []map[string]string{master, unlabelled, master}, labelled: true,
			members: []etcdmember.Member{m1, m2, m3}},
		{name: "still labelled", reads: []map[string]string{master}, labelled: true, members: []etcdmember.Member{m1, m2, m3}},
		{name: "not yet labelled (still joining)", reads: []map[string]string{nil, unlabelled}, members: []etcdmember.Member{m1, m2, m3}},
		{name: "the other of two masters down: refused", reads: []map[string]string{unlabelled}, labelled: true,
			members: []etcdmember.Member{m1, m2}, down: []etcdmember.Member{m1}, wantSaid: "not leaving yet: Node m2 lost its label " +
				manifests.MasterLabel + ", but refusing: etcd has no quorum: 1 of 2"},
		{name: "the last master: refused", reads: []map[string]string{nil}, labelled: true,
			members: []etcdmember.Member{m2}, wantSaid: "last master"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, sys := t.TempDir(), &recorder{}
			for _, p := range []string{filepath.Join(manifests.StaticPodDir, "etcd.yaml"), filepath.Join(manifests.StaticPodDir, "kube-apiserver.yaml"),
				filepath.Join(manifests.EtcdDataDir, "member", "snap", "db")} {
				write(t, root, p, "x")
			}
			e := &fakeEtcd{members: tc.members, down: map[string]bool{}}
			for _, m := range tc.down {
				e.down[m.ClientURLs[0]] = true
			}
			var console []string
			w := &Watcher{Kube: nodeReads(tc.reads...), Node: "m2", Root: root, Sys: sys, Interval: 5 * time.Millisecond,
				Console: func(f string, a ...any) { console = append(console, fmt.Sprintf(f, a...)) },
				Now:     func() time.Time { return time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC) },
				Master: &Master{Labelled: func() bool { return tc.labelled }, PeerURL: etcdmember.PeerURL("10.77.0.12"),
					Etcd: func() (Etcd, error) { return e, nil }}}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			err := w.Run(ctx)
			said := strings.Join(console, "\n")
			if tc.wantSaid != "" && !strings.Contains(said, tc.wantSaid) {
				t.Errorf("console %q, want %q", said, tc.wantSaid)
			}
			_, stamped := Removed(root)
			_, etcdThere := os.Stat(filepath.Join(root, manifests.StaticPodDir, "etcd.yaml"))
			_, dataThere := os.Stat(filepath.Join(root, manifests.EtcdDataDir, "member"))
			if !tc.wantLeave {
				if err != context.DeadlineExceeded || stamped || len(sys.cmds) > 0 || etcdThere != nil || dataThere != nil || len(e.removed) > 0 {
					t.Fatalf("changed the node: err %v, stamped %v, commands %v, etcd manifest %v, data %v, removed %x",
						err, stamped, sys.cmds, etcdThere, dataThere, e.removed)
				}
				if strings.Count(said, "not leaving yet") > 1 {
					t.Errorf("the same refusal said more than once: %q", said)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if slices.ContainsFunc(e.members, func(m etcdmember.Member) bool { return m.Name == "m2" }) {
				t.Errorf("m2 is still an etcd member: %v", e.members)
			}
			if !stamped || len(sys.cmds) != 1 || !os.IsNotExist(etcdThere) || !os.IsNotExist(dataThere) {
				t.Errorf("stamped %v, commands %v, etcd manifest %v, data %v", stamped, sys.cmds, etcdThere, dataThere)
			}
			for _, f := range []string{"etcd.yaml.20261126T060000Z", "kube-apiserver.yaml.20261126T060000Z", filepath.Base(manifests.EtcdMemberRemovedMarker)} {
				if _, err := os.Stat(filepath.Join(root, manifests.AnchorBackupDir, f)); err != nil {
					t.Errorf("backup directory: %v", err)
				}
			}
			if _, err := os.Stat(filepath.Join(root, manifests.EtcdDataDir)); err != nil {
				t.Errorf("the data directory itself (a mount point) went: %v", err)
			}
		})
	}
}

func write(t *testing.T, root, p, data string) {
	t.Helper()
	full := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// NewWatcher gives a master (and only a master) its way out, labelled by
// either role's label stamp.
func TestNewWatcherMaster(t *testing.T) {
	for _, role := range []string{nodefile.RoleGenesis, nodefile.RoleMaster, nodefile.RoleWorker} {
		root := t.TempDir()
		write(t, root, nodefile.Path, `{"apiVersion": "`+nodefile.APIVersion+`", "kind": "`+nodefile.Kind+`", "name": "m2", "role": "`+role+`", "address": "10.77.0.12",
		"cluster": {"apiServerPort": 6443, "discoveryName": "kube-apiserver.kiln.internal"},
		"masters": [{"name": "m1", "address": "10.77.0.11"}]}`)
		write(t, root, filepath.Join(nodefile.KubeconfigDir, "kubelet.conf"), kubeconfig)
		w, err := NewWatcher(root, &recorder{}, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		if role == nodefile.RoleWorker {
			if w.Master != nil {
				t.Errorf("a worker can leave the control plane")
			}
			continue
		}
		if w.Master.Labelled() {
			t.Errorf("%s: labelled without a stamp", role)
		}
		write(t, root, filepath.Join(nodefile.StampDir, nodefile.RoleMaster, "label"), "2026-11-26T06:00:00Z\n")
		if !w.Master.Labelled() || w.Master.PeerURL != "https://10.77.0.12:2380" {
			t.Errorf("%s: labelled %v, peer URL %s", role, w.Master.Labelled(), w.Master.PeerURL)
		}
		if _, err := w.Master.Etcd(); err == nil || !strings.Contains(err.Error(), "etcd client TLS") {
			t.Errorf("%s: etcd without the PKI: %v", role, err)
		}
	}
}

const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://kube-apiserver.kiln.internal:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`

// A master kiln node remove marked retires its control plane once etcd
// confirms its member is gone, and keeps it otherwise.
func TestMarkedMasterRetiresOnlyWithoutItsMember(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members []etcdmember.Member
		retired bool
	}{
		{"member removed by kiln node remove", []etcdmember.Member{m1, m3}, true},
		{"member still listed", []etcdmember.Member{m1, m2, m3}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, filepath.Join(manifests.StaticPodDir, "etcd.yaml"), "x")
			e := &fakeEtcd{members: tc.members}
			var console []string
			w := &Watcher{Kube: fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m2"}}), Node: "m2", Root: root, Sys: &recorder{},
				Console: func(f string, a ...any) { console = append(console, fmt.Sprintf(f, a...)) },
				Master:  &Master{Labelled: func() bool { return true }, PeerURL: etcdmember.PeerURL("10.77.0.12"), Etcd: func() (Etcd, error) { return e, nil }}}
			if err := w.Leave(context.Background(), "2026-11-26T06:00:00Z"); err != nil {
				t.Fatal(err)
			}
			_, err := os.Stat(filepath.Join(root, manifests.StaticPodDir, "etcd.yaml"))
			if moved := os.IsNotExist(err); moved != tc.retired {
				t.Errorf("etcd's manifest moved: %v, want %v (console %q)", moved, tc.retired, console)
			}
			if len(e.removed) > 0 {
				t.Errorf("the marked node removed members %x itself", e.removed)
			}
			if last := console[len(console)-1]; last != "left the cluster" {
				t.Errorf("console ends %q", last)
			}
		})
	}
}
