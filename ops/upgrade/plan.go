package upgrade

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/contract/imagemanifest"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/skew"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// Running is what a node runs now, as it publishes it.
type Running struct {
	Kubernetes string // the kubelet's version (the Node's status)
	Kiln       string // nodefile.VersionAnnotation
	KilnSHA256 string // nodefile.KilnDigestAnnotation
	Etcd       string // a master's member's release, from its status
}

// Step is one node's place in the rollout.
type Step struct {
	Order      int
	Node, Role string
	From       Running
	// BootID is the boot the node reports now: the health gate's
	// healthgate.After once the node is rebooted.
	BootID string
	// Skip is why the node is not rolled ("" : it is).
	Skip string
	// Refusals are the pre-checks it fails now: any keeps the rollout
	// from starting.
	Refusals []Check
}

// Check is a failed pre-check of a step: its name ("node", "ready",
// "etcd health", "etcd member", "quorum", "kubelet", "etcd") and why.
type Check struct {
	Name, Why string
}

// Plan is the rollout of a site onto a target build.
type Plan struct {
	Target imagemanifest.Versions
	Steps  []Step
	// Problems keep the rollout from starting that no step to roll
	// carries: a node it skips that is not Ready.
	Problems []string
	Notes    []string
}

// ErrRefused is wrapped by Plan.Err.
var ErrRefused = errors.New("kiln upgrade refuses to start")

// Err is nil when the rollout may start: no problem, and no step it
// rolls refused.
func (p *Plan) Err() error {
	var refused []string
	for _, s := range p.Steps {
		if len(s.Refusals) > 0 {
			refused = append(refused, s.Node)
		}
	}
	var why []string
	if len(p.Problems) > 0 {
		why = append(why, fmt.Sprintf("%d problems (lines starting with problem:)", len(p.Problems)))
	}
	if len(refused) > 0 {
		why = append(why, fmt.Sprintf("the steps of %s fail their pre-checks (lines starting with refused:)", strings.Join(refused, ", ")))
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrRefused, strings.Join(why, "; "))
}

// ToRoll are the steps that are not skipped.
func (p *Plan) ToRoll() []Step {
	return slices.DeleteFunc(slices.Clone(p.Steps), func(s Step) bool { return s.Skip != "" })
}

// Planner gathers what a plan needs: the site, the cluster's Nodes, and
// etcd's members, their health and releases.
type Planner struct {
	Site   *site.Site
	Kube   kubernetes.Interface
	Etcd   Etcd
	Target imagemanifest.Versions
	// AcceptOutage lets a cluster with fewer than three voting members,
	// which loses quorum whichever master reboots, roll all the same: its
	// API is down while each master reboots. A quorum refusal of a
	// larger cluster stands.
	AcceptOutage bool
}

// cluster is what the planner read of the cluster.
type cluster struct {
	nodes    map[string]*corev1.Node
	members  []etcdmember.Member
	health   probed
	down     []string          // voting members that did not answer
	releases map[uint64]string // by member ID; absent: it did not answer
}

// probed is each member's answer to one status call, by client URL: the
// plan judges etcd's health once, and every pre-check reads the same
// answers.
type probed map[string]error

// Healthy is the answer recorded for clientURL.
func (p probed) Healthy(_ context.Context, clientURL string) error {
	if err, ok := p[clientURL]; ok {
		return err
	}
	return fmt.Errorf("%s: not asked", clientURL)
}

// Plan reads the cluster and orders the steps. An error is a cluster
// that cannot be read (its Nodes, etcd's member list).
func (p *Planner) Plan(ctx context.Context) (*Plan, error) {
	c, err := p.read(ctx)
	if err != nil {
		return nil, err
	}
	plan := &Plan{Target: p.Target}
	for i, sn := range rolloutOrder(p.Site) {
		s := p.step(ctx, c, sn, i+1)
		if s.Skip != "" && s.notReady != "" {
			plan.Problems = append(plan.Problems, fmt.Sprintf("node %s is %s: the rollout starts only when every node of the site is Ready", s.Node, s.notReady))
		}
		if s.outage && s.Skip == "" {
			plan.Notes = append(plan.Notes, fmt.Sprintf("etcd has %d voting members: it loses quorum, and the cluster's API is down, while %s reboots (--accept-outage)", voters(c.members), s.Node))
		}
		plan.Steps = append(plan.Steps, s.Step)
	}
	p.siteRelease(plan)
	plan.Notes = append(plan.Notes, unnamedNodes(p.Site, c.nodes)...)
	plan.Notes = append(plan.Notes, unpublished(plan.Steps)...)
	return plan, nil
}

func (p *Planner) read(ctx context.Context) (*cluster, error) {
	nl, err := p.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the cluster's Nodes: %w", err)
	}
	c := &cluster{nodes: map[string]*corev1.Node{}, releases: map[uint64]string{}}
	for i := range nl.Items {
		c.nodes[nl.Items[i].Name] = &nl.Items[i]
	}
	if c.members, err = p.Etcd.MemberList(ctx); err != nil {
		return nil, fmt.Errorf("etcd's member list: %w", err)
	}
	c.health = probed{}
	for _, m := range c.members {
		if len(m.ClientURLs) == 0 {
			continue
		}
		url := m.ClientURLs[0]
		if c.health[url] = p.Etcd.Healthy(ctx, url); c.health[url] != nil {
			continue
		}
		if v, err := p.Etcd.Version(ctx, url); err == nil {
			c.releases[m.ID] = v
		}
	}
	c.down = etcdmember.DownVoters(ctx, c.health, c.members)
	return c, nil
}

// rolloutOrder is the site's masters (genesis included) in file order,
// then its workers in file order.
func rolloutOrder(s *site.Site) []site.Node {
	var masters, workers []site.Node
	for _, n := range s.Nodes {
		if isMaster(n.Role) {
			masters = append(masters, n)
		} else {
			workers = append(workers, n)
		}
	}
	return append(masters, workers...)
}

func isMaster(role string) bool { return role == site.RoleGenesis || role == site.RoleMaster }

// planned is a step as planned, and its Node's readiness.
type planned struct {
	Step
	notReady string
	member   *etcdmember.Member // a master's, when it has exactly one
	// outage: its quorum refusal was lifted by AcceptOutage.
	outage bool
}

func (s *planned) refuse(name, format string, args ...any) {
	s.Refusals = append(s.Refusals, Check{Name: name, Why: fmt.Sprintf(format, args...)})
}

// step is node sn's step: what it runs, whether it is done, and its
// pre-checks.
func (p *Planner) step(ctx context.Context, c *cluster, sn site.Node, order int) planned {
	s := planned{Step: Step{Order: order, Node: sn.Name, Role: sn.Role}}
	obj := c.nodes[sn.Name]
	if obj == nil {
		s.refuse("node", "no Node %s in the cluster (not joined, or removed)", sn.Name)
		return s
	}
	s.BootID = obj.Status.NodeInfo.BootID
	s.From = Running{Kubernetes: obj.Status.NodeInfo.KubeletVersion, Kiln: obj.Annotations[nodefile.VersionAnnotation],
		KilnSHA256: obj.Annotations[nodefile.KilnDigestAnnotation]}
	s.notReady = notReady(obj)
	if isMaster(sn.Role) {
		s.member = p.masterMember(c, sn, &s)
		if s.member != nil {
			s.From.Etcd = c.releases[s.member.ID]
		}
	}
	if p.done(s.Step) {
		s.Skip = "already on the target image"
		return s
	}
	if s.notReady != "" {
		s.refuse("ready", "node %s is %s", sn.Name, s.notReady)
	}
	if len(c.down) > 0 {
		s.refuse("etcd health", "voting members not answering: %s", strings.Join(c.down, ", "))
	}
	p.skew(&s)
	if s.member != nil {
		switch r := etcdmember.FailureRefusal(ctx, c.health, c.members, *s.member); {
		case r != nil && p.AcceptOutage && voters(c.members) < 3 && len(c.down) == 0:
			s.outage = true
		case r != nil:
			s.refuse("quorum", "%s. %s", r.Why, r.WayOut)
		}
	}
	return s
}

// masterMember is master sn's etcd member; a master with none, or more
// than one, is refused.
func (p *Planner) masterMember(c *cluster, sn site.Node, s *planned) *etcdmember.Member {
	peer := ""
	if sn.IP().IsValid() {
		peer = etcdmember.PeerURL(sn.IP().String())
	}
	mine := etcdmember.MembersOf(c.members, sn.Name, peer)
	switch len(mine) {
	case 0:
		s.refuse("etcd member", "master %s has no etcd member (kiln node list shows the cluster's)", sn.Name)
		return nil
	case 1:
		if mine[0].IsLearner {
			s.refuse("etcd member", "master %s's etcd member %s is a learner: its join has not finished", sn.Name, etcdmember.Describe(mine[0]))
		}
		return &mine[0]
	}
	var ds []string
	for _, m := range mine {
		ds = append(ds, etcdmember.Describe(m))
	}
	s.refuse("etcd member", "master %s has %d etcd members (%s): remove the stale one first (kiln node list names it)", sn.Name, len(mine), strings.Join(ds, "; "))
	return nil
}

// siteRelease holds the site's Kubernetes release to the pair a rollout
// moves between: the site's nodes keep their node files through the
// roll, and a node accepts its file's release on the new image only when
// it steps to the image's (firstboot's checkKubernetesVersion). A site
// that cannot step to it is a problem; one of another release than the
// image's gets a note saying what to do after the rollout.
func (p *Planner) siteRelease(plan *Plan) {
	have, want := p.Site.Cluster.KubernetesVersion, p.Target.Kubernetes
	switch err := skew.Kubernetes(have, want); {
	case err != nil:
		plan.Problems = append(plan.Problems, fmt.Sprintf("%s: cluster.kubernetesVersion: %v: every node would refuse its node file on the new image", p.Site.File, err))
	case !sameRelease(have, want):
		plan.Notes = append(plan.Notes, fmt.Sprintf("%s names Kubernetes %s, the image %s: each node takes that pair on the slot the rollout stages; "+
			"once every node runs %s, set cluster.kubernetesVersion to it and run kiln gen", p.Site.File, have, want, want))
	}
}

// done reports whether the node runs the target image: its kiln binary's
// digest and its kubelet's release are the target's (and a master's
// etcd, when it answered). A node that publishes no digest is not done:
// kiln cannot tell which image it runs.
func (p *Planner) done(s Step) bool {
	if s.From.KilnSHA256 != p.Target.KilnSHA256 || !sameRelease(s.From.Kubernetes, p.Target.Kubernetes) {
		return false
	}
	return s.From.Etcd == "" || sameRelease(s.From.Etcd, p.Target.Etcd)
}

// skew refuses every release step the node may not take at once.
func (p *Planner) skew(s *planned) {
	if err := skew.Kubernetes(s.From.Kubernetes, p.Target.Kubernetes); err != nil {
		s.refuse("kubelet", "%v", err)
	}
	switch {
	case s.member == nil:
	case s.From.Etcd == "":
		s.refuse("etcd", "the release of %s's etcd member is unknown (it did not answer a status call)", s.Node)
	default:
		if err := skew.Etcd(s.From.Etcd, p.Target.Etcd); err != nil {
			s.refuse("etcd", "%v", err)
		}
	}
}

// notReady is "" for a Ready Node, else its state ("NotReady", "Ready
// Unknown", ...).
func notReady(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		switch c.Status {
		case corev1.ConditionTrue:
			return ""
		case corev1.ConditionFalse:
			return "NotReady"
		}
		return "Ready Unknown (its kubelet stopped reporting)"
	}
	return "without a Ready condition"
}

// unnamedNodes are notes on the cluster's Nodes the site does not name:
// the rollout leaves them.
func unnamedNodes(s *site.Site, nodes map[string]*corev1.Node) []string {
	var names []string
	for name := range nodes {
		if !slices.ContainsFunc(s.Nodes, func(n site.Node) bool { return n.Name == name }) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		out = append(out, fmt.Sprintf("Node %s is not in the site file %s: kiln upgrade does not roll it", n, s.File))
	}
	return out
}

// unpublished is a note naming the nodes rolled because they publish no
// kiln digest.
func unpublished(steps []Step) []string {
	var names []string
	for _, s := range steps {
		if s.Skip == "" && s.From.Kubernetes != "" && s.From.KilnSHA256 == "" {
			names = append(names, s.Node)
		}
	}
	if len(names) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("rolled because they publish no %s (their agent predates it), so kiln cannot tell which image they run: %s",
		nodefile.KilnDigestAnnotation, strings.Join(names, ", "))}
}

// voters counts the voting members.
func voters(list []etcdmember.Member) int {
	n := 0
	for _, m := range list {
		if !m.IsLearner {
			n++
		}
	}
	return n
}
