package nodeops

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/upgradeask"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/golden"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/etcdmember"
)

var listNow = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// fixedExpiry is every node's first certificate expiry a year on, but
// for those in expired, a day ago.
func fixedExpiry(expired ...string) func(site.Node) (time.Time, error) {
	return func(n site.Node) (time.Time, error) {
		for _, e := range expired {
			if e == n.Name {
				return listNow.Add(-24 * time.Hour), nil
			}
		}
		return listNow.AddDate(1, 0, 0), nil
	}
}

// Every case's output is its golden file testdata/list/<name>.txt; a
// problem, and only a problem, makes Err non-nil (kiln node list exits 1).
func TestList(t *testing.T) {
	ready, notReady := corev1.ConditionTrue, corev1.ConditionUnknown
	for _, tc := range []struct {
		name      string
		site      string
		objs      []runtime.Object
		noAPI     bool
		etcd      *fakeEtcd // nil: etcd cannot be reached
		expired   []string
		wantProbs int
	}{
		{name: "healthy", site: twoMasterSite,
			objs: []runtime.Object{kubeNode("m1", "genesis", "10.0.0.11", ready), kubeNode("m2", "master", "10.0.0.12", ready), kubeNode("w1", "worker", "10.0.0.21", ready)},
			etcd: &fakeEtcd{members: []etcdmember.Member{m1, m2}}},
		{name: "a master down is a note, not a problem", site: twoMasterSite,
			objs: []runtime.Object{kubeNode("m1", "genesis", "10.0.0.11", ready), kubeNode("m2", "master", "10.0.0.12", notReady), kubeNode("w1", "worker", "10.0.0.21", ready)},
			etcd: &fakeEtcd{members: []etcdmember.Member{m1, m2}, down: downURLs(m2)}},
		{name: "missing and stale members", site: testSite,
			objs: []runtime.Object{kubeNode("m1", "genesis", "10.0.0.11", ready), kubeNode("m2", "master", "10.0.0.12", notReady),
				kubeNode("m3", "master", "10.0.0.13", ready), kubeNode("w1", "worker", "10.0.0.21", ready), kubeNode("x9", "worker", "10.0.0.29", ready)},
			etcd: &fakeEtcd{members: []etcdmember.Member{m1, member(0xa2, "m2", "10.0.0.99"), member(0xa7, "m7", "10.0.0.17"),
				{ID: 0xb1, PeerURLs: []string{etcdmember.PeerURL("10.0.0.21")}, IsLearner: true}}},
			expired:   []string{"w1"},
			wantProbs: 4},
		{name: "a joining master is a learner", site: twoMasterSite,
			objs: []runtime.Object{kubeNode("m1", "genesis", "10.0.0.11", ready), kubeNode("m2", "master", "10.0.0.12", notReady)},
			etcd: &fakeEtcd{members: []etcdmember.Member{m1, {ID: 0xb2, PeerURLs: m2.PeerURLs, ClientURLs: m2.ClientURLs, IsLearner: true}}}},
		{name: "no apiserver", site: twoMasterSite, noAPI: true,
			etcd:      &fakeEtcd{members: []etcdmember.Member{m1, m2}},
			wantProbs: 1},
		{name: "nodes the site does not name", site: twoMasterSite,
			objs: []runtime.Object{kubeNode("m1", "genesis", "10.0.0.11", ready), kubeNode("m2", "master", "10.0.0.12", ready),
				// x7's agent (or an administrator) gave it the master label;
				// x8's kubelet calls it a master, which any kubelet can.
				kubeNode("x7", "master", "10.0.0.17", ready), kubeNode("x8", "worker", "10.0.0.18", ready, labelled(manifests.RoleLabel, "master"))},
			etcd: &fakeEtcd{members: []etcdmember.Member{m1, m2, member(0xa7, "x7", "10.0.0.17")}}},
		{name: "a node's last answers to kiln upgrade are notes", site: twoMasterSite,
			objs: []runtime.Object{
				kubeNode("m1", "genesis", "10.0.0.11", ready, annotated(upgradeask.RolledBackAnnotation,
					`{"request":"3f2a9c0d11e4b7a8","from":"b","to":"a","reason":"health gate not passed in 10m0s: ready: not Ready"}`)),
				kubeNode("m2", "master", "10.0.0.12", ready),
				kubeNode("w1", "worker", "10.0.0.21", ready, annotated(upgradeask.FailedAnnotation,
					`{"request":"0123456789abcdef","reason":"this node boots from the ISO or by PXE and has no root slot to stage into: re-image it"}`))},
			etcd: &fakeEtcd{members: []etcdmember.Member{m1, m2}}},
		{name: "a role not done on this boot is a note", site: twoMasterSite,
			objs: []runtime.Object{
				kubeNode("m1", "genesis", "10.0.0.11", ready, booted("231b9d61-65aa-4e5d-92e1-d365992fcc16"),
					annotated(nodefile.RoleDoneAnnotation, "10875dcd-e264-4c42-8ee3-d4fa3ffea011")),
				kubeNode("m2", "master", "10.0.0.12", ready, booted("5d0c3f1e-0000-4000-8000-000000000002"),
					annotated(nodefile.RoleDoneAnnotation, "5d0c3f1e-0000-4000-8000-000000000002")),
				kubeNode("w1", "worker", "10.0.0.21", ready, booted("9a8b7c6d-0000-4000-8000-000000000003"))},
			etcd: &fakeEtcd{members: []etcdmember.Member{m1, m2}}},
		{name: "no etcd", site: twoMasterSite,
			objs:      []runtime.Object{kubeNode("m1", "genesis", "10.0.0.11", ready), kubeNode("m2", "master", "10.0.0.12", ready), kubeNode("w1", "worker", "10.0.0.21", ready)},
			wantProbs: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &Lister{Site: parseSite(t, tc.site), CertExpiry: fixedExpiry(tc.expired...), Now: listNow}
			if tc.noAPI {
				l.KubeErr = errors.New("no apiserver of the site site.yaml is ready: master m1 (https://10.0.0.11:6443): connection refused")
			} else {
				l.Kube = clientset(evictDeletes, tc.objs...)
			}
			if tc.etcd != nil {
				l.Etcd = tc.etcd
			} else {
				l.EtcdErr = errors.New("the etcd client certificate: pki/apiserver-etcd-client.crt: file does not exist")
			}
			listing := l.List(context.Background())
			var out bytes.Buffer
			if err := listing.Write(&out); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", "list", strings.ReplaceAll(tc.name, " ", "-")+".txt"), out.Bytes())
			if len(listing.Problems) != tc.wantProbs {
				t.Errorf("%d problems, want %d:\n%s", len(listing.Problems), tc.wantProbs, out.String())
			}
			if err := listing.Err(); (err != nil) != (tc.wantProbs > 0) || (err != nil && !errors.Is(err, ErrProblems)) {
				t.Errorf("Err() = %v with %d problems", err, len(listing.Problems))
			}
		})
	}
}
