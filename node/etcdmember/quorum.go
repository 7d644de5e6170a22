// Removal safety: whether a member can leave without taking etcd down.

package etcdmember

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Refusal is a removal kiln will not do: why, and the way out.
type Refusal struct {
	Why    string
	WayOut string
	// Unanswered: the refusal rests on voting members that did not answer
	// a status call in time. Such a member may be slow rather than gone
	// (a starved machine's etcd misses a 5 s status call), so asking
	// again can lift the refusal; a refusal without it cannot be.
	Unanswered bool
}

func (r *Refusal) Error() string { return "refusing: " + r.Why + ". " + r.WayOut }

// DocsLostMaster is where the operator's page explains a master lost for
// good, two-member clusters included.
const DocsLostMaster = "docs/operations.md#a-master-lost-for-good"

// Prober asks one member for its status (Client.Healthy).
type Prober interface {
	Healthy(ctx context.Context, clientURL string) error
}

// health is which voting members answer a status call.
type health struct {
	voters   []Member
	answers  map[uint64]bool
	nAnswers int
}

// votersHealth asks every voting member for its status (5 s each).
func votersHealth(ctx context.Context, e Prober, list []Member) health {
	h := health{answers: map[uint64]bool{}}
	for _, m := range list {
		if m.IsLearner {
			continue
		}
		h.voters = append(h.voters, m)
		if len(m.ClientURLs) > 0 && e.Healthy(ctx, m.ClientURLs[0]) == nil {
			h.answers[m.ID] = true
			h.nAnswers++
		}
	}
	return h
}

// down names the voting members that do not answer, but skip.
func (h health) down(skip uint64) []string {
	var out []string
	for _, m := range h.voters {
		if !h.answers[m.ID] && m.ID != skip {
			out = append(out, memberName(m))
		}
	}
	return out
}

func memberName(m Member) string {
	if m.Name != "" {
		return m.Name
	}
	return fmt.Sprintf("%x", m.ID)
}

// quorum is the number of voting members a cluster of n voters needs to
// commit anything.
func quorum(n int) int { return n/2 + 1 }

// RemovalRefusal is nil when removing the voting member m from the
// cluster whose member list is list keeps etcd working: m is not the
// last voter, a quorum answers now (the removal must commit), and a
// quorum of the voters that remain answers after it. A learner never
// counts: removing it is always safe.
func RemovalRefusal(ctx context.Context, e Prober, list []Member, m Member) *Refusal {
	if m.IsLearner {
		return nil
	}
	h := votersHealth(ctx, e, list)
	n := len(h.voters)
	switch {
	case n <= 1:
		return &Refusal{
			Why: fmt.Sprintf("%s is the cluster's last master (etcd member %s is its only voting member): removing it ends the cluster", memberName(m), Describe(m)),
			WayOut: "Add a master first (a master node in the site file, kiln gen, boot it; wait until kiln node list shows it as a voter), then remove this one. " +
				"To retire the whole cluster, power its machines off instead.",
		}
	case h.nAnswers < quorum(n):
		down := h.down(0)
		return &Refusal{
			Unanswered: true,
			Why: fmt.Sprintf("etcd has no quorum: %d of %d voting members answer (not answering: %s), and removing member %s needs %d to commit",
				h.nAnswers, n, strings.Join(down, ", "), Describe(m), quorum(n)),
			WayOut: fmt.Sprintf("Bring %s back first. If a member is lost for good and the rest cannot reach quorum without it "+
				"(one of two masters, two of three), kiln cannot remove it: see %s for etcd's disaster recovery", strings.Join(down, ", "), DocsLostMaster),
		}
	}
	after := h.nAnswers
	if h.answers[m.ID] {
		after--
	}
	if after < quorum(n-1) {
		down := h.down(m.ID)
		return &Refusal{
			Unanswered: true,
			Why: fmt.Sprintf("removing %s would leave etcd without quorum: %d voting members would remain, of which %d answer (not answering: %s; they need %d)",
				memberName(m), n-1, after, strings.Join(down, ", "), quorum(n-1)),
			WayOut: fmt.Sprintf("Bring %s back, or remove it first (kiln node remove %s), then remove %s.",
				strings.Join(down, ", "), down[0], memberName(m)),
		}
	}
	return nil
}

// MembersOf are the members registered for a node: by its name, or by
// its peer URL (an unstarted learner has no name yet).
func MembersOf(list []Member, name, peerURL string) []Member {
	var out []Member
	for _, m := range list {
		if m.Name == name || (peerURL != "" && slices.Contains(m.PeerURLs, peerURL)) {
			out = append(out, m)
		}
	}
	return out
}

// Describe names a member in messages: ID, name and peer URLs.
func Describe(m Member) string {
	name := m.Name
	if name == "" {
		name = "not started"
	}
	return fmt.Sprintf("%x (%s, %s)", m.ID, name, strings.Join(m.PeerURLs, ","))
}

// FailureRefusal is nil when etcd keeps quorum while the voting member
// m is down (a reboot): the other voters that answer now are a quorum of
// all the voters, m still counted among them. A learner never counts.
// One or two voters never keep quorum without one of them.
func FailureRefusal(ctx context.Context, e Prober, list []Member, m Member) *Refusal {
	if m.IsLearner {
		return nil
	}
	h := votersHealth(ctx, e, list)
	n := len(h.voters)
	others := h.nAnswers
	if h.answers[m.ID] {
		others--
	}
	if others >= quorum(n) {
		return nil
	}
	down := h.down(m.ID)
	r := &Refusal{
		Unanswered: len(down) > 0,
		Why: fmt.Sprintf("etcd would lose quorum while member %s is down: of %d voting members, the %d others answering are fewer than the %d it needs",
			Describe(m), n, others, quorum(n)),
		WayOut: fmt.Sprintf("Run at least three masters (a master in the site file, kiln gen, boot it) before %s goes down", memberName(m)),
	}
	if len(down) > 0 {
		r.Why += fmt.Sprintf(" (not answering: %s)", strings.Join(down, ", "))
		r.WayOut = fmt.Sprintf("Bring %s back first", strings.Join(down, ", "))
	}
	return r
}

// DownVoters names the voting members that do not answer a status call,
// in list order: none when etcd is healthy.
func DownVoters(ctx context.Context, e Prober, list []Member) []string {
	return votersHealth(ctx, e, list).down(0)
}
