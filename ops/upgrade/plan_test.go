package upgrade

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kiln-project/kiln/contract/imagemanifest"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/golden"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// threeMasters is three masters and two workers, w2 on DHCP.
const threeMasters = `apiVersion: kiln.dev/v1alpha1
kind: Site
cluster: {name: lab, kubernetesVersion: v1.37.1, podCIDR: 10.244.0.0/16, serviceCIDR: 10.96.0.0/12}
nodes:
  - {name: m1, role: genesis, macs: ["52:54:00:00:00:11"], installDisk: /dev/vda, network: {address: 10.0.0.11/24, gateway: 10.0.0.1}}
  - {name: w1, role: worker, macs: ["52:54:00:00:00:21"], installDisk: /dev/vda, network: {address: 10.0.0.21/24, gateway: 10.0.0.1}}
  - {name: m2, role: master, macs: ["52:54:00:00:00:12"], installDisk: /dev/vda, network: {address: 10.0.0.12/24, gateway: 10.0.0.1}}
  - {name: m3, role: master, macs: ["52:54:00:00:00:13"], installDisk: /dev/vda, network: {address: 10.0.0.13/24, gateway: 10.0.0.1}}
  - {name: w2, role: worker, macs: ["52:54:00:00:00:22"], installDisk: /dev/vda, network: {dhcp: true}}
`

// twoMasters is the QEMU cluster's shape: two masters, a worker.
const twoMasters = `apiVersion: kiln.dev/v1alpha1
kind: Site
cluster: {name: lab, kubernetesVersion: v1.37.1, podCIDR: 10.244.0.0/16, serviceCIDR: 10.96.0.0/12}
nodes:
  - {name: m1, role: genesis, macs: ["52:54:00:00:00:11"], installDisk: /dev/vda, network: {address: 10.0.0.11/24, gateway: 10.0.0.1}}
  - {name: m2, role: master, macs: ["52:54:00:00:00:12"], installDisk: /dev/vda, network: {address: 10.0.0.12/24, gateway: 10.0.0.1}}
  - {name: w1, role: worker, macs: ["52:54:00:00:00:21"], installDisk: /dev/vda, network: {address: 10.0.0.21/24, gateway: 10.0.0.1}}
`

var target = imagemanifest.Versions{Kubernetes: "v1.37.1", Etcd: "v3.6.5", KilnSHA256: "0522ca4d8ea4f77f1a1d2e9fe15979eb"}

// An image a node runs: its kubelet's release, its etcd's, its kiln.
type image struct{ kube, etcd, kiln, sha string }

var (
	old     = image{"v1.36.3", "3.5.21", "v0.9.0", "77aa00bb11cc22dd"}
	oldest  = image{"v1.35.2", "3.4.35", "v0.8.0", "66aa00bb11cc22dd"}
	newer   = image{"v1.38.0", "3.6.5", "v1.1.0", "88aa00bb11cc22dd"}
	current = image{"v1.37.1", "3.6.5", "v1.0.0", target.KilnSHA256}
	// noDigest is an image whose agent publishes no kiln digest.
	noDigest = image{"v1.36.3", "3.5.21", "v0.9.0", ""}
)

// fakeEtcd is a member list whose members answer with their release,
// but those in down.
type fakeEtcd struct {
	members  []etcdmember.Member
	releases map[string]string // by client URL
	down     map[string]bool
	asked    map[string]int // status calls, by client URL
}

func (f *fakeEtcd) MemberList(context.Context) ([]etcdmember.Member, error) { return f.members, nil }

func (f *fakeEtcd) Healthy(_ context.Context, url string) error {
	if f.asked == nil {
		f.asked = map[string]int{}
	}
	f.asked[url]++
	if f.down[url] {
		return fmt.Errorf("%s: context deadline exceeded", url)
	}
	return nil
}

func (f *fakeEtcd) Version(_ context.Context, url string) (string, error) {
	if f.down[url] {
		return "", fmt.Errorf("%s: context deadline exceeded", url)
	}
	return f.releases[url], nil
}

// fakeCluster is a fake cluster: Nodes and etcd members.
type fakeCluster struct {
	objs []runtime.Object
	etcd *fakeEtcd
}

var addrs = map[string]string{"m1": "10.0.0.11", "m2": "10.0.0.12", "m3": "10.0.0.13", "w1": "10.0.0.21", "w2": "10.0.0.22", "x9": "10.0.0.29"}

// with adds node name running im, Ready as ready; a master gets a voting
// member of im's etcd.
func (c fakeCluster) with(name string, im image, ready corev1.ConditionStatus) fakeCluster {
	c = c.withNode(name, im, ready)
	if name[0] == 'm' {
		c = c.withMember(name, im.etcd, false)
	}
	return c
}

// withNode adds node name's Node only.
func (c fakeCluster) withNode(name string, im image, ready corev1.ConditionStatus) fakeCluster {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{nodefile.VersionAnnotation: im.kiln}}}
	if im.sha != "" {
		n.Annotations[nodefile.KilnDigestAnnotation] = im.sha
	}
	n.Status.NodeInfo = corev1.NodeSystemInfo{KubeletVersion: im.kube, BootID: "boot-" + name}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
	c.objs = append(c.objs, n)
	return c
}

func (c fakeCluster) withMember(name, release string, learner bool) fakeCluster {
	if c.etcd == nil {
		c.etcd = &fakeEtcd{releases: map[string]string{}, down: map[string]bool{}}
	}
	m := etcdmember.Member{ID: uint64(0xa0 + len(c.etcd.members)), Name: name, IsLearner: learner,
		PeerURLs: []string{etcdmember.PeerURL(addrs[name])}, ClientURLs: []string{etcdmember.ClientURL(addrs[name])}}
	c.etcd.members = append(c.etcd.members, m)
	c.etcd.releases[m.ClientURLs[0]] = release
	return c
}

func (c fakeCluster) down(name string) fakeCluster {
	c.etcd.down[etcdmember.ClientURL(addrs[name])] = true
	return c
}

// all is every node of threeMasters running im, Ready.
func all(im image) fakeCluster {
	var c fakeCluster
	for _, n := range []string{"m1", "w1", "m2", "m3", "w2"} {
		c = c.with(n, im, corev1.ConditionTrue)
	}
	return c
}

// siteOn is the three-master site with its cluster on Kubernetes release.
func siteOn(release string) string {
	return strings.Replace(threeMasters, "kubernetesVersion: v1.37.1", "kubernetesVersion: "+release, 1)
}

// Every case's plan is its golden file testdata/plan/<name>.txt (what
// --dry-run prints); actions pins each node's ACTION cell, and the plan
// refuses to start exactly when a problem or a refusal is expected.
func TestPlan(t *testing.T) {
	ready, notReady := corev1.ConditionTrue, corev1.ConditionFalse
	for _, tc := range []struct {
		name     string
		site     string
		cluster  fakeCluster
		actions  map[string]string
		problems int
		// acceptOutage is Planner.AcceptOutage (--accept-outage).
		acceptOutage bool
		// targetKubernetes, if set, is the target build's release.
		targetKubernetes string
	}{
		{name: "a fresh rollout: masters first, one at a time, then workers", site: threeMasters, cluster: all(old),
			actions: map[string]string{"m1": "roll", "m2": "roll", "m3": "roll", "w1": "roll", "w2": "roll"}},
		{name: "a re-run resumes: nodes on the target are skipped", site: threeMasters,
			cluster: fakeCluster{}.with("m1", current, ready).with("w1", old, ready).with("m2", current, ready).with("m3", old, ready).with("w2", old, ready),
			actions: map[string]string{"m1": "skip: already on the target image", "m2": "skip: already on the target image", "m3": "roll", "w1": "roll"}},
		{name: "everything on the target", site: threeMasters, cluster: all(current),
			actions: map[string]string{"m1": "skip: already on the target image", "w2": "skip: already on the target image"}},
		{name: "a node that publishes no digest is rolled", site: threeMasters,
			cluster: fakeCluster{}.with("m1", current, ready).with("w1", noDigest, ready).with("m2", current, ready).with("m3", current, ready).with("w2", current, ready),
			actions: map[string]string{"w1": "roll", "w2": "skip: already on the target image"}},
		{name: "a skipped minor, an etcd two steps behind", site: threeMasters, cluster: all(oldest),
			actions: map[string]string{"m1": "refused: kubelet, etcd", "w1": "refused: kubelet"}},
		{name: "the site one minor behind the image: a note", site: siteOn("v1.36.3"), cluster: all(old),
			actions: map[string]string{"m1": "roll", "w2": "roll"}},
		{name: "an image a minor behind the site: a problem", site: threeMasters, cluster: all(old), targetKubernetes: "v1.36.3",
			actions: map[string]string{"m1": "roll", "w2": "roll"}, problems: 1},
		{name: "a downgrade across minors", site: threeMasters, cluster: all(newer),
			actions: map[string]string{"m1": "refused: kubelet", "w2": "refused: kubelet"}},
		{name: "two masters: neither keeps quorum down", site: twoMasters,
			cluster: fakeCluster{}.with("m1", old, ready).with("m2", old, ready).with("w1", old, ready),
			actions: map[string]string{"m1": "refused: quorum", "m2": "refused: quorum", "w1": "roll"}},
		{name: "two masters, the outage accepted: both roll", site: twoMasters, acceptOutage: true,
			cluster: fakeCluster{}.with("m1", old, ready).with("m2", old, ready).with("w1", old, ready),
			actions: map[string]string{"m1": "roll", "m2": "roll", "w1": "roll"}},
		{name: "three masters, one down, the outage accepted: still refused", site: threeMasters, cluster: all(old).down("m3"), acceptOutage: true,
			actions: map[string]string{"m1": "refused: etcd health, quorum", "m2": "refused: etcd health, quorum"}},
		{name: "a worker NotReady", site: threeMasters,
			cluster: fakeCluster{}.with("m1", old, ready).with("w1", old, notReady).with("m2", old, ready).with("m3", old, ready).with("w2", old, ready),
			actions: map[string]string{"m1": "roll", "w1": "refused: ready"}},
		{name: "a skipped node NotReady keeps the rollout from starting", site: threeMasters,
			cluster: fakeCluster{}.with("m1", current, notReady).with("w1", old, ready).with("m2", old, ready).with("m3", old, ready).with("w2", old, ready),
			actions: map[string]string{"m1": "skip: already on the target image", "m2": "roll"}, problems: 1},
		{name: "an etcd member down", site: threeMasters, cluster: all(old).down("m3"),
			actions: map[string]string{"m1": "refused: etcd health, quorum", "m3": "refused: etcd health, etcd", "w1": "refused: etcd health"}},
		{name: "a master without a member, a learner, a stale member, a Node missing", site: threeMasters,
			cluster: fakeCluster{}.withNode("m1", old, ready).with("w1", old, ready).with("m2", old, ready).withMember("m2", "3.5.21", false).
				withNode("m3", old, ready).withMember("m3", "3.5.21", true).with("x9", old, ready),
			actions: map[string]string{"m1": "refused: etcd member", "m2": "refused: etcd member", "m3": "refused: etcd member", "w1": "roll", "w2": "refused: node"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := site.Parse("site.yaml", []byte(tc.site))
			if err != nil {
				t.Fatal(err)
			}
			tgt := target
			tgt.Kubernetes = cmp.Or(tc.targetKubernetes, tgt.Kubernetes)
			p := &Planner{Site: s, Kube: fake.NewClientset(tc.cluster.objs...), Etcd: tc.cluster.etcd, Target: tgt, AcceptOutage: tc.acceptOutage}
			plan, err := p.Plan(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := plan.Write(&out); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", "plan", strings.ReplaceAll(tc.name, " ", "-")+".txt"), out.Bytes())
			refused := len(plan.Problems) > 0
			for _, st := range plan.Steps {
				if want, ok := tc.actions[st.Node]; ok && st.action() != want {
					t.Errorf("%s: %q, want %q", st.Node, st.action(), want)
				}
				refused = refused || len(st.Refusals) > 0
			}
			if len(plan.Problems) != tc.problems {
				t.Errorf("%d problems, want %d:\n%s", len(plan.Problems), tc.problems, out.String())
			}
			if err := plan.Err(); (err != nil) != refused || (err != nil && !errors.Is(err, ErrRefused)) {
				t.Errorf("Err() = %v; refusals or problems: %v", err, refused)
			}
		})
	}
}

// The rollout's order is the site's masters in file order, then its
// workers in file order, whatever order the file mixes them in.
func TestRolloutOrder(t *testing.T) {
	s, err := site.Parse("site.yaml", []byte(threeMasters))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range rolloutOrder(s) {
		got = append(got, n.Name)
	}
	if strings.Join(got, " ") != "m1 m2 m3 w1 w2" {
		t.Errorf("order %v, want m1 m2 m3 w1 w2", got)
	}
}

// The plan asks each member for its status once (a member that does not
// answer costs a 5 s bound each time), and every pre-check reads that.
func TestPlanAsksEachMemberOnce(t *testing.T) {
	s, err := site.Parse("site.yaml", []byte(threeMasters))
	if err != nil {
		t.Fatal(err)
	}
	c := all(old).down("m3")
	p := &Planner{Site: s, Kube: fake.NewClientset(c.objs...), Etcd: c.etcd, Target: target}
	if _, err := p.Plan(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, m := range c.etcd.members {
		if n := c.etcd.asked[m.ClientURLs[0]]; n != 1 {
			t.Errorf("member %s was asked for its status %d times, want once", m.Name, n)
		}
	}
}
