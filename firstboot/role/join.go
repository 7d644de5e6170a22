package role

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// Bounds of the etcd join on a slow, loaded machine: the learner's
// start includes importing the images and the kubelet's first sync.
// Node.joinBounds overrides them in tests.
const (
	learnerStartBound = 15 * time.Minute
	promoteBound      = 10 * time.Minute
)

type joinBounds struct{ learnerStart, promote time.Duration }

// afterPromotion are the components a joining master starts only once
// its etcd member votes: its apiserver talks to the local member, which
// must never be a learner.
var afterPromotion = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// etcdJoiner owns this node's way into the etcd cluster: the member
// list, the membership record, the learner's start and promotion, and
// undoing a join that did not finish.
type etcdJoiner struct {
	env nodeEnv
	// startNode writes the node's files but the held static pods and
	// starts the kubelet (nodeFiles.startNode): the learner's etcd starts
	// from the record the join writes.
	startNode func(ctx context.Context, p manifests.Params, hold []string) error
	bounds    joinBounds
}

// join makes this node a voting member of the cluster c reaches: it
// resumes its own member (its data is here), reuses an unstarted learner
// with its peer URL, or removes a stale member of its name or peer URL
// when quorum survives that, and adds itself as a learner; then it
// starts its etcd with the member list the add returned and promotes it.
// A learner that does not start or catch up within its bound is removed
// again, its manifest and data moved aside, so the next boot retries.
func (j etcdJoiner) join(ctx context.Context, c etcdCluster) error {
	self := etcdmember.PeerURL(j.env.file.Address)
	list, err := c.MemberList(ctx)
	if err != nil {
		return err
	}
	rec, err := j.memberRecord(ctx, c, list, self)
	if err != nil {
		return err
	}
	if err := etcdmember.Write(j.env.root, rec); err != nil {
		return fmt.Errorf("recording the etcd membership: %w", err)
	}
	j.env.log("etcd: member %s (%s) joins with initial cluster %s", rec.ID, rec.Name, rec.InitialCluster())
	if err := j.startNode(ctx, j.env.params(rec), afterPromotion); err != nil {
		return err
	}
	var id uint64
	fmt.Sscanf(rec.ID, "%x", &id)
	if err := j.waitLearnerStarted(ctx, c, id); err != nil {
		return j.undoJoin(ctx, c, id, err)
	}
	if err := j.promote(ctx, c, id); err != nil {
		return j.undoJoin(ctx, c, id, err)
	}
	if list, err := c.MemberList(ctx); err == nil {
		rec = membershipAfterAdd(j.env.file.Name, self, id, list)
	}
	return etcdmember.Write(j.env.root, rec)
}

// memberRecord decides how this node enters the member list and returns
// the record to start its etcd from; it adds a learner when needed.
func (j etcdJoiner) memberRecord(ctx context.Context, c etcdCluster, list []member, self string) (etcdmember.Membership, error) {
	var mine *member
	var stale []member
	for i, m := range list {
		switch {
		case slices.Contains(m.PeerURLs, self):
			mine = &list[i]
		case m.Name == j.env.file.Name:
			stale = append(stale, m)
		}
	}
	hasData := j.env.hasEtcdData()
	switch {
	case mine != nil && hasData:
		j.env.log("etcd: this node's data belongs to member %x (%s): resuming it", mine.ID, mine.Name)
		return membershipAfterAdd(j.env.file.Name, self, mine.ID, list), nil
	case mine != nil && mine.IsLearner && mine.Name == "":
		j.env.log("etcd: reusing unstarted learner %x with this node's peer URL %s", mine.ID, self)
		return membershipAfterAdd(j.env.file.Name, self, mine.ID, list), nil
	case mine != nil:
		stale = append(stale, *mine)
	}
	for _, s := range stale {
		if err := j.removeStale(ctx, c, list, s); err != nil {
			return etcdmember.Membership{}, err
		}
	}
	if hasData {
		if err := j.env.moveAside(manifests.EtcdDataDir+"/member", "etcd-data"); err != nil {
			return etcdmember.Membership{}, err
		}
	}
	id, all, err := c.AddLearner(ctx, self)
	if err != nil {
		return etcdmember.Membership{}, err
	}
	j.env.log("etcd: added learner %x for %s", id, self)
	return membershipAfterAdd(j.env.file.Name, self, id, all), nil
}

// removeStale removes a member registered for this node (its name or
// peer URL) that this node's empty data dir cannot be: the node was
// re-imaged. It refuses when the removal could not reach quorum.
func (j etcdJoiner) removeStale(ctx context.Context, c etcdCluster, list []member, s member) error {
	if !s.IsLearner {
		voting, healthy := 0, 0
		for _, m := range list {
			if m.IsLearner {
				continue
			}
			voting++
			if m.ID != s.ID && len(m.ClientURLs) > 0 && c.Healthy(ctx, m.ClientURLs[0]) == nil {
				healthy++
			}
		}
		if need := voting/2 + 1; healthy < need {
			return fmt.Errorf("etcd member %x (%s, %v) is registered for this node, which has no etcd data (re-imaged?); "+
				"removing it needs quorum, and only %d of %d voting members answer (need %d). Bring the other masters back and reboot this one, "+
				"or restore quorum by hand (etcdctl member remove %x once a quorum answers); see docs/cluster.md",
				s.ID, s.Name, s.PeerURLs, healthy, voting, need, s.ID)
		}
	}
	if err := c.Remove(ctx, s.ID); err != nil {
		return fmt.Errorf("removing stale etcd member %x (%s, %v): %w", s.ID, s.Name, s.PeerURLs, err)
	}
	j.env.log("etcd: removed stale member %x (%s, %v) registered for this node", s.ID, s.Name, s.PeerURLs)
	return nil
}

// waitLearnerStarted waits until the member has published its name:
// its etcd runs and reached the leader.
func (j etcdJoiner) waitLearnerStarted(ctx context.Context, c etcdCluster, id uint64) error {
	return retry.Wait(ctx, fmt.Sprintf("etcd member %x started", id), cmp.Or(j.bounds.learnerStart, learnerStartBound), j.env.log, func(ctx context.Context) error {
		list, err := c.MemberList(ctx)
		if err != nil {
			return err
		}
		for _, m := range list {
			if m.ID == id {
				if m.Name == "" {
					return fmt.Errorf("member %x has not started", id)
				}
				return nil
			}
		}
		return retry.Final(fmt.Errorf("member %x is no longer in the member list", id))
	})
}

// promote makes the learner a voting member, retrying while it catches
// up with the leader or another learner is ahead of it.
func (j etcdJoiner) promote(ctx context.Context, c etcdCluster, id uint64) error {
	return retry.Wait(ctx, fmt.Sprintf("etcd member %x promoted", id), cmp.Or(j.bounds.promote, promoteBound), j.env.log, func(ctx context.Context) error {
		err := c.Promote(ctx, id)
		if err != nil && strings.Contains(err.Error(), "can only promote a learner member") && !strings.Contains(err.Error(), "in sync") {
			return nil // a voting member already: an earlier boot promoted it
		}
		return err
	})
}

// undoJoin removes the learner this node added and moves its manifest and
// data aside: no half-joined member is left behind.
func (j etcdJoiner) undoJoin(ctx context.Context, c etcdCluster, id uint64, cause error) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	if err := c.Remove(ctx, id); err != nil && !strings.Contains(err.Error(), "member not found") {
		errs = append(errs, fmt.Errorf("removing learner %x: %w", id, err))
	}
	for _, p := range []struct{ path, what string }{
		{filepath.Join(manifests.StaticPodDir, "etcd.yaml"), "etcd-manifest"},
		{manifests.EtcdDataDir + "/member", "etcd-data"},
		{etcdmember.Path, "etcd-membership"},
	} {
		if err := j.env.moveAside(p.path, p.what); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w; cleaning up: %w", cause, errors.Join(errs...))
	}
	return fmt.Errorf("%w; removed learner %x and moved its manifest and data aside: the next boot tries again", cause, id)
}
