package nodeops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/upgradeask"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// Row is one line of kiln node list.
type Row struct {
	Name, Role, Address, Ready, Etcd, Kiln, Kubelet, CertExpiry string
}

// Listing is what List found: a row per node (the site's in file order,
// then Nodes the site does not name, then etcd members no node owns),
// the problems that make kiln node list fail, and notes.
type Listing struct {
	Rows     []Row
	Problems []string
	Notes    []string
}

// ErrProblems is Listing.Err's answer when List found a problem.
var ErrProblems = errors.New("the node list has problems")

// Err is nil when no problem was found.
func (l Listing) Err() error {
	if len(l.Problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d (each on a line starting with problem:)", ErrProblems, len(l.Problems))
}

// Write prints the table, then every problem and note on its own line.
func (l Listing) Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROLE\tADDRESS\tREADY\tETCD\tKILN\tKUBELET\tCERT-EXPIRY")
	for _, r := range l.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Role, r.Address, r.Ready, r.Etcd, r.Kiln, r.Kubelet, r.CertExpiry)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range l.Problems {
		fmt.Fprintln(w, "problem:", p)
	}
	for _, n := range l.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	return nil
}

// Lister gathers a site's nodes from the apiserver and etcd. Either may
// be nil, with its error: the list then says so and fails, and shows
// what the other told.
type Lister struct {
	Site    *site.Site
	Kube    kubernetes.Interface
	KubeErr error
	Etcd    Etcd
	EtcdErr error
	// CertExpiry is when the first of a site node's certificates expires.
	CertExpiry func(site.Node) (time.Time, error)
	// Now is the time expiry is measured against.
	Now time.Time
}

// List gathers every node. A master of the site (or a Node labelled as
// one) without an etcd member, a member of a master under another name
// or peer URL, and a member that no node owns are problems.
func (l *Lister) List(ctx context.Context) Listing {
	var out Listing
	nodes, haveAPI := l.nodes(ctx, &out)
	list, answers, haveEtcd := l.members(ctx, &out)
	owned := map[uint64]bool{}
	for _, n := range nodes {
		mine := etcdmember.MembersOf(list, n.name, n.peerURL())
		for _, m := range mine {
			owned[m.ID] = true
		}
		row := Row{Name: n.name, Role: cmp.Or(n.role(), "?"), Address: l.address(n), Ready: "?", Etcd: "?", Kiln: "-", Kubelet: "-", CertExpiry: "-"}
		if haveAPI {
			row.Ready = readyOf(n.obj)
			l.apiNotes(n, &out)
		}
		if n.obj != nil {
			row.Kiln = cmp.Or(n.obj.Annotations[nodefile.VersionAnnotation], "-")
			row.Kubelet = cmp.Or(n.obj.Status.NodeInfo.KubeletVersion, "-")
		}
		if haveEtcd {
			stale := etcdFindings(n, mine, answers, &out)
			row.Etcd = etcdCell(mine, answers, stale)
		}
		if n.site != nil && l.CertExpiry != nil {
			row.CertExpiry = l.expiry(*n.site, &out)
		}
		out.Rows = append(out.Rows, row)
	}
	for _, m := range list {
		if owned[m.ID] {
			continue
		}
		out.Rows = append(out.Rows, Row{Name: cmp.Or(m.Name, "?"), Role: "-", Address: peerHost(m), Ready: "no Node",
			Etcd: etcdCell([]etcdmember.Member{m}, answers, map[uint64]bool{m.ID: true}), Kiln: "-", Kubelet: "-", CertExpiry: "-"})
		wayOut := fmt.Sprintf("kiln node remove %s removes it (checking quorum first)", m.Name)
		if m.Name == "" {
			wayOut = fmt.Sprintf("An unstarted learner: the master it was added for removes it when its join gives up; else etcdctl member remove %x (%s)", m.ID, DocsStaleMember)
		}
		out.Problems = append(out.Problems, fmt.Sprintf("etcd member %s belongs to no node of the site or the cluster: stale. %s", etcdmember.Describe(m), wayOut))
	}
	return out
}

// nodes are the site's nodes in file order, then the cluster's Nodes
// the site does not name, sorted.
func (l *Lister) nodes(ctx context.Context, out *Listing) ([]node, bool) {
	byName := map[string]*corev1.Node{}
	haveAPI := false
	switch {
	case l.Kube == nil:
		out.Problems = append(out.Problems, fmt.Sprintf("the apiserver: %v", l.KubeErr))
	default:
		nl, err := l.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			out.Problems = append(out.Problems, fmt.Sprintf("the apiserver: listing Nodes: %v", err))
			break
		}
		haveAPI = true
		for i := range nl.Items {
			byName[nl.Items[i].Name] = &nl.Items[i]
		}
	}
	var nodes []node
	for i, sn := range l.Site.Nodes {
		nodes = append(nodes, node{name: sn.Name, site: &l.Site.Nodes[i], obj: byName[sn.Name]})
		delete(byName, sn.Name)
	}
	extra := make([]string, 0, len(byName))
	for name := range byName {
		extra = append(extra, name)
	}
	sort.Strings(extra)
	for _, name := range extra {
		nodes = append(nodes, node{name: name, obj: byName[name]})
	}
	return nodes, haveAPI
}

// members is etcd's member list and which members answer a status call.
func (l *Lister) members(ctx context.Context, out *Listing) ([]etcdmember.Member, map[uint64]bool, bool) {
	if l.Etcd == nil {
		out.Problems = append(out.Problems, fmt.Sprintf("etcd: %v", l.EtcdErr))
		return nil, nil, false
	}
	list, err := l.Etcd.MemberList(ctx)
	if err != nil {
		out.Problems = append(out.Problems, fmt.Sprintf("etcd: %v", err))
		return nil, nil, false
	}
	answers := map[uint64]bool{}
	for _, m := range list {
		answers[m.ID] = len(m.ClientURLs) > 0 && l.Etcd.Healthy(ctx, m.ClientURLs[0]) == nil
	}
	return list, answers, true
}

func (l *Lister) address(n node) string {
	if a := n.address(); a != "" {
		return a
	}
	if n.site != nil && n.site.Network.DHCP {
		return "dhcp"
	}
	return "-"
}

// apiNotes says what the site and the cluster disagree on.
func (l *Lister) apiNotes(n node, out *Listing) {
	switch {
	case n.obj == nil:
		out.Notes = append(out.Notes, fmt.Sprintf("%s: no Node in the cluster (not booted or not joined yet, or removed)", n.name))
	case n.site == nil:
		out.Notes = append(out.Notes, fmt.Sprintf("%s: a Node the site file %s does not name", n.name, l.Site.File))
	}
	if n.obj != nil {
		if note := roleDoneNote(n.name, n.obj); note != "" {
			out.Notes = append(out.Notes, note)
		}
		out.Notes = append(out.Notes, upgradeNotes(n.name, n.obj.Annotations)...)
	}
}

// roleDoneNote is "" when the node's agent said its role finished on the
// boot its kubelet reports (nodefile.RoleDoneAnnotation, what kiln
// upgrade's health gate waits for), else what it said.
func roleDoneNote(name string, obj *corev1.Node) string {
	boot, done := obj.Status.NodeInfo.BootID, obj.Annotations[nodefile.RoleDoneAnnotation]
	switch {
	case boot == "" || done == boot:
		return ""
	case done == "":
		return fmt.Sprintf("%s: its role has not said it finished on any boot (no %s): kiln upgrade's health gate waits for it; the node's console says what the role waits for", name, nodefile.RoleDoneAnnotation)
	}
	return fmt.Sprintf("%s: its role has not said it finished on this boot (%s names boot %s, its kubelet reports %s): kiln upgrade's health gate waits for it; the node's console says what the role waits for",
		name, nodefile.RoleDoneAnnotation, shortID(done), shortID(boot))
}

// shortID is a boot ID's first 8 characters, as the console shows them.
func shortID(id string) string { return id[:min(8, len(id))] }

// upgradeNotes are what a node last answered kiln upgrade
// (contract/upgradeask): the rollback of a stage it tried, or why it
// could not stage one.
func upgradeNotes(name string, ann map[string]string) []string {
	var notes []string
	if v, ok := ann[upgradeask.RolledBackAnnotation]; ok {
		if rb, err := upgradeask.DecodeRolledBack(v); err == nil {
			notes = append(notes, fmt.Sprintf("%s: %s (kiln upgrade's request %s)", name, rb.Error(), rb.Request))
		} else {
			notes = append(notes, fmt.Sprintf("%s: %v", name, err))
		}
	}
	if v, ok := ann[upgradeask.FailedAnnotation]; ok {
		if f, err := upgradeask.DecodeFailed(v); err == nil {
			notes = append(notes, fmt.Sprintf("%s: could not stage kiln upgrade's request %s: %s", name, f.Request, f.Reason))
		} else {
			notes = append(notes, fmt.Sprintf("%s: %v", name, err))
		}
	}
	return notes
}

// etcdCell is the ETCD column: voter, learner or none, "(no answer)"
// after a member that does not answer a status call, "(stale)" after
// one that is not the node's own.
func etcdCell(mine []etcdmember.Member, answers, stale map[uint64]bool) string {
	if len(mine) == 0 {
		return "none"
	}
	var cells []string
	for _, m := range mine {
		c := "voter"
		if m.IsLearner {
			c = "learner"
		}
		if !answers[m.ID] {
			c += " (no answer)"
		}
		if stale[m.ID] {
			c += " (stale)"
		}
		cells = append(cells, c)
	}
	return strings.Join(cells, "+")
}

// etcdFindings checks a node's members: a master needs exactly its own
// (its name, its peer URL); a worker has none. It returns the stale ones.
func etcdFindings(n node, mine []etcdmember.Member, answers map[uint64]bool, out *Listing) map[uint64]bool {
	stale := map[uint64]bool{}
	master := n.role() == site.RoleGenesis || n.role() == site.RoleMaster
	if master && len(mine) == 0 {
		out.Problems = append(out.Problems, fmt.Sprintf("master %s has no etcd member (its join never finished, or it was removed): "+
			"re-image it and it joins again, or take it out of the site file (%s)", n.name, etcdmember.DocsLostMaster))
	}
	for _, m := range mine {
		wayOut := fmt.Sprintf("etcdctl member remove %x (%s)", m.ID, DocsStaleMember)
		if master {
			wayOut = fmt.Sprintf("Re-image %s: its join replaces a stale member of its name or peer URL; or %s", n.name, wayOut)
		}
		stale[m.ID] = true
		switch {
		case !master:
			out.Problems = append(out.Problems, fmt.Sprintf("%s %s has etcd member %s, and only masters run etcd: stale. %s",
				cmp.Or(n.role(), "node"), n.name, etcdmember.Describe(m), wayOut))
		case n.peerURL() != "" && !slices.Contains(m.PeerURLs, n.peerURL()):
			out.Problems = append(out.Problems, fmt.Sprintf("etcd member %s is named %s, whose peer URL is %s: stale (the master was re-addressed). %s",
				etcdmember.Describe(m), n.name, n.peerURL(), wayOut))
		case m.Name != "" && m.Name != n.name:
			out.Problems = append(out.Problems, fmt.Sprintf("etcd member %s has %s's peer URL under another name: stale. %s", etcdmember.Describe(m), n.name, wayOut))
		case !answers[m.ID]:
			delete(stale, m.ID)
			out.Notes = append(out.Notes, fmt.Sprintf("%s: etcd member %s does not answer (down?)", n.name, etcdmember.Describe(m)))
		case m.IsLearner:
			delete(stale, m.ID)
			out.Notes = append(out.Notes, fmt.Sprintf("%s: etcd member %s is a learner: the master is still joining", n.name, etcdmember.Describe(m)))
		default:
			delete(stale, m.ID)
		}
	}
	return stale
}

// DocsStaleMember is where the operator's page removes a stale member by
// hand.
const DocsStaleMember = "docs/operations.md#a-stale-etcd-member"

// expiry is the CERT-EXPIRY column: the date the node's first
// certificate expires.
func (l *Lister) expiry(sn site.Node, out *Listing) string {
	t, err := l.CertExpiry(sn)
	if err != nil {
		out.Notes = append(out.Notes, fmt.Sprintf("%s: certificates: %v", sn.Name, err))
		return "unreadable"
	}
	date := t.UTC().Format(time.DateOnly)
	if !t.After(l.Now) {
		out.Notes = append(out.Notes, fmt.Sprintf("%s: a certificate expired on %s: kiln pki renew, kiln gen, and re-feed the node", sn.Name, date))
		return "EXPIRED " + date
	}
	return date
}

// peerHost is the host of a member's first peer URL.
func peerHost(m etcdmember.Member) string {
	if len(m.PeerURLs) == 0 {
		return "-"
	}
	u, err := url.Parse(m.PeerURLs[0])
	if err != nil || u.Hostname() == "" {
		return m.PeerURLs[0]
	}
	return u.Hostname()
}
