package leave

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/anchor"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// Master is what a master needs to leave the control plane when it is
// removed through the API.
type Master struct {
	// Labelled reports whether the role has put the master label on this
	// master's Node (its label phase is stamped): before that, no Node or
	// a Node without the label is a master still joining, not a removal.
	Labelled func() bool
	// PeerURL is this master's etcd peer URL, which names its member
	// before the member has started.
	PeerURL string
	// Etcd dials the cluster's etcd through the other masters.
	Etcd func() (Etcd, error)
	// Bound is how long leaving may take; LeaveBound when zero.
	Bound time.Duration
}

// Etcd is what leaving needs of the cluster's etcd (etcdmember.Client).
type Etcd interface {
	MemberList(ctx context.Context) ([]etcdmember.Member, error)
	Remove(ctx context.Context, id uint64) error
	Healthy(ctx context.Context, clientURL string) error
	Close() error
}

// LeaveBound bounds one attempt at leaving the control plane.
const LeaveBound = 3 * time.Minute

func (m *Master) bound() time.Duration {
	if m.Bound == 0 {
		return LeaveBound
	}
	return m.Bound
}

// masterRemoved reports whether this read of the Node says the master
// was removed through the API, and how.
func (w *Watcher) masterRemoved(node *corev1.Node, err error) (string, bool) {
	if w.Master == nil || !w.Master.Labelled() {
		return "", false
	}
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("Node %s was deleted", w.Node), true
	case err != nil:
		return "", false
	}
	if _, ok := node.Labels[manifests.MasterLabel]; !ok {
		return fmt.Sprintf("Node %s lost its label %s", w.Node, manifests.MasterLabel), true
	}
	return "", false
}

// LeaveControlPlane takes this master out of the cluster, in the order
// that keeps etcd's quorum: its etcd member is removed first (refused,
// with the reason, when the rest could not keep a quorum or this is the
// last master), then the removal is recorded (later boots stay out), the
// etcd anchor's cleanup is told the member is gone, the kubelet and
// every pod stop, the control-plane manifests move to the backup
// directory (never deleted) and etcd's data directory is wiped. Each
// step is idempotent, so an attempt cut short is finished by the next.
func (w *Watcher) LeaveControlPlane(ctx context.Context, why string) error {
	ctx, cancel := context.WithTimeout(ctx, w.Master.bound())
	defer cancel()
	if err := w.removeOwnMember(ctx, why); err != nil {
		return err
	}
	now := w.now().UTC()
	text := fmt.Sprintf("removed from the cluster through the API at %s: %s\n", now.Format(time.RFC3339), why)
	if err := w.stop(ctx, text, why); err != nil {
		return err
	}
	if err := w.retire(ctx); err != nil {
		return err
	}
	w.sayLeft(ctx)
	return nil
}

// retire takes down what a master whose etcd member has left keeps: it
// tells the etcd anchor's cleanup the member is gone, moves the
// control-plane manifests to the backup directory (never deleted) and
// wipes etcd's data directory (a removed member's data cannot rejoin).
func (w *Watcher) retire(ctx context.Context) error {
	now := w.now().UTC()
	if err := atomicfile.WriteFile(filepath.Join(w.Root, manifests.EtcdMemberRemovedMarker), []byte(now.Format(time.RFC3339)+"\n"), 0o644, nil); err != nil {
		return fmt.Errorf("recording the member's removal for the etcd anchor: %w", err)
	}
	h := anchor.Host{Root: w.Root}
	for _, c := range anchor.Components {
		if err := h.Backup(ctx, c, now); err != nil {
			return fmt.Errorf("moving %s's manifest to %s: %w", c, anchor.BackupDir, err)
		}
	}
	w.Console("moved the control-plane manifests to %s", anchor.BackupDir)
	if err := wipe(filepath.Join(w.Root, manifests.EtcdDataDir)); err != nil {
		return fmt.Errorf("wiping etcd's data directory: %w", err)
	}
	w.Console("wiped etcd's data directory %s (its member has left the cluster)", manifests.EtcdDataDir)
	return nil
}

// retireIfMemberGone retires the control plane of a master kiln node
// remove took out, once etcd confirms its member is gone; otherwise the
// manifests and data stay, and it says why.
func (w *Watcher) retireIfMemberGone(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, w.Master.bound())
	defer cancel()
	err := w.memberGone(ctx)
	if err == nil {
		err = w.retire(ctx)
	}
	if err != nil {
		w.Console("kept the control-plane manifests and etcd's data: %v", err)
	}
}

// memberGone is nil when etcd lists no member of this master's.
func (w *Watcher) memberGone(ctx context.Context) error {
	e, err := w.Master.Etcd()
	if err != nil {
		return fmt.Errorf("etcd cannot be reached: %w", err)
	}
	defer e.Close()
	list, err := e.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("etcd's member list cannot be read: %w", err)
	}
	if mine := etcdmember.MembersOf(list, w.Node, w.Master.PeerURL); len(mine) > 0 {
		return fmt.Errorf("etcd still lists member %s", etcdmember.Describe(mine[0]))
	}
	return nil
}

// removeOwnMember removes this master's etcd members (by name, or by
// peer URL for one not started), each under etcdmember.RemovalRefusal,
// and checks the member list no longer has any. A member already gone
// is done.
func (w *Watcher) removeOwnMember(ctx context.Context, why string) error {
	e, err := w.Master.Etcd()
	if err != nil {
		return fmt.Errorf("%s, but etcd cannot be reached: %w", why, err)
	}
	defer e.Close()
	list, err := e.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("%s, but etcd's member list cannot be read: %w", why, err)
	}
	mine := etcdmember.MembersOf(list, w.Node, w.Master.PeerURL)
	if len(mine) == 0 {
		w.Console("%s: etcd has no member named %s or with peer URL %s (already removed)", why, w.Node, w.Master.PeerURL)
		return nil
	}
	for _, m := range mine {
		if r := etcdmember.RemovalRefusal(ctx, e, list, m); r != nil {
			return fmt.Errorf("%s, but %w", why, r)
		}
		w.Console("%s: removing this master's etcd member %s before its static pod goes", why, etcdmember.Describe(m))
		if err := e.Remove(ctx, m.ID); err != nil && !etcdmember.IsNotFound(err) {
			return fmt.Errorf("removing etcd member %s: %w", etcdmember.Describe(m), err)
		}
		if list, err = e.MemberList(ctx); err != nil {
			return fmt.Errorf("reading etcd's member list after removing %s: %w", etcdmember.Describe(m), err)
		}
	}
	if left := etcdmember.MembersOf(list, w.Node, w.Master.PeerURL); len(left) > 0 {
		return fmt.Errorf("etcd still lists member %s after its removal", etcdmember.Describe(left[0]))
	}
	w.Console("removed this master's etcd member")
	return nil
}

// wipe removes everything in dir, keeping dir (a mount point of the
// etcd pod's).
func wipe(dir string) error {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return atomicfile.SyncDir(dir)
}
