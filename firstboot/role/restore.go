package role

import (
	"context"
	"fmt"
	"maps"
	"os"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kiln-project/kiln/contract/etcdsnapshot"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/etcdmember"
	"github.com/kiln-project/kiln/node/etcdrestore"
)

// restoredStamp marks a genesis node whose etcd data was restored from
// its node file's snapshot: no later boot restores again.
const restoredStamp = "genesis/restored"

// restoring reports whether this boot restores etcd before it first
// starts: the node file names a snapshot, and the cluster was neither
// bootstrapped nor restored on an earlier boot.
func (e nodeEnv) restoring() bool {
	return e.file.Restore != nil && !e.stamped("genesis/bootstrap") && !e.stamped(restoredStamp)
}

// restoreEtcd restores the genesis member's data from the node file's
// snapshot, once, before etcd first starts (package etcdrestore): a
// snapshot that fails its hashes or names another cluster is refused
// before anything is written. The membership record is then the
// genesis one, a cluster of this member alone: with the restored WAL
// etcd takes its membership from the data, not from initial-cluster.
func (cp *controlPlane) restoreEtcd(context.Context) error {
	f := cp.env.file
	ca, err := os.ReadFile(cp.env.path(nodefile.PKIDir + "/ca.crt"))
	if err != nil {
		return fmt.Errorf("reading the Kubernetes CA the snapshot's cluster is checked against: %w", err)
	}
	rec, action, err := etcdrestore.Run(etcdrestore.Request{
		Root:                cp.env.root,
		Snapshot:            f.Restore.Path,
		SHA256:              f.Restore.SHA256,
		DataDir:             manifests.EtcdDataDir,
		Name:                f.Name,
		PeerURL:             etcdmember.PeerURL(f.Address),
		Cluster:             etcdsnapshot.IdentityOf(f.Cluster.Name, ca),
		AllowUnknownCluster: f.Restore.AllowUnknownCluster,
	})
	switch {
	case err != nil && action == etcdrestore.Refuse:
		return fmt.Errorf("%w from %s: %w; nothing was changed", errRefused, f.Restore.Path, err)
	case err != nil:
		return fmt.Errorf("restoring etcd from %s: %w", f.Restore.Path, err)
	}
	if action == etcdrestore.Finished {
		cp.env.log("etcd was restored from %s on an earlier boot (revision %d, bumped to %d)", f.Restore.Path, rec.Revision, rec.BumpedTo)
	} else {
		cp.env.log("restored etcd from %s (revision %d, bumped to %d)", f.Restore.Path, rec.Revision, rec.BumpedTo)
	}
	return stampFiles(cp.env.path(StampDir)).Mark(restoredStamp)
}

// recordIdentity writes the cluster's identity ConfigMap (package
// etcdsnapshot): every snapshot taken from now on says which cluster
// it is, and a restore refuses another cluster's.
func (cp *controlPlane) recordIdentity(ctx context.Context) error {
	ca, err := os.ReadFile(cp.env.path(nodefile.PKIDir + "/ca.crt"))
	if err != nil {
		return err
	}
	want := etcdsnapshot.IdentityOf(cp.env.file.Cluster.Name, ca).Data()
	kube, err := cp.api.kubeAt(cp.env.file.Address)
	if err != nil {
		return err
	}
	cms := kube.CoreV1().ConfigMaps(etcdsnapshot.IdentityNamespace)
	return retry.Wait(ctx, "the cluster's identity recorded", cp.wait, cp.env.log, func(ctx context.Context) error {
		cm, err := cms.Get(ctx, etcdsnapshot.IdentityName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cms.Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: etcdsnapshot.IdentityName, Namespace: etcdsnapshot.IdentityNamespace,
					Labels: map[string]string{"app.kubernetes.io/managed-by": "kiln"}},
				Data: want,
			}, metav1.CreateOptions{FieldManager: "kiln"})
			return err
		}
		if err != nil || maps.Equal(cm.Data, want) {
			return err
		}
		cm.Data = want
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "kiln"})
		return err
	})
}
