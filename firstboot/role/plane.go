package role

import (
	"context"
	"errors"

	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// start writes the control plane from the membership record,
// creating a new cluster's record on the first boot. A new cluster's etcd
// and apiserver start at once, its controller-manager and scheduler once
// the apiserver is ready (phase controllers); one that existed before (a
// later boot, or a master whose member just joined) starts in order.
func (cp *controlPlane) start(ctx context.Context) error {
	rec, err := etcdmember.Read(cp.env.root)
	if errors.Is(err, etcdmember.ErrNone) && cp.env.file.Role == nodefile.RoleGenesis && !cp.env.stamped("genesis/bootstrap") {
		rec = etcdmember.Genesis(cp.env.file.Name, cp.env.file.Address)
		err = etcdmember.Write(cp.env.root, rec)
	}
	if err != nil {
		return err
	}
	if rec.State != etcdmember.StateExisting {
		return cp.files.startNode(ctx, cp.env.params(rec), controllerPods)
	}
	cp.etcdPeers = len(rec.Peers) > 1
	etcd, closeEtcd, err := cp.ownEtcd()
	if err != nil {
		return err
	}
	defer closeEtcd()
	kube, err := cp.api.kubeAt(cp.env.file.Address)
	if err != nil {
		return err
	}
	return cp.startInOrder(ctx, cp.env.params(rec), cp.restartStages(rec, etcd, kube))
}

// waitOwnAPIServer waits for this node's own apiserver to be ready. A
// control plane that joins or comes back beside other etcd members finds
// the cluster's RBAC defaults in place, so the apiserver's hook that
// reconciles them again is not waited for (see rbacAside).
func (cp *controlPlane) waitOwnAPIServer(ctx context.Context) error {
	return cp.waitAPIServer(ctx, nil)
}

// waitAPIServer is waitOwnAPIServer's wait, running meanwhile (when set)
// after every poll the apiserver is not ready yet.
func (cp *controlPlane) waitAPIServer(ctx context.Context, meanwhile func(context.Context, kubernetes.Interface)) error {
	kube, err := cp.api.kubeAt(cp.env.file.Address)
	if err != nil {
		return err
	}
	except := cp.rbacAside()
	if len(except) > 0 {
		cp.env.log("the cluster has its default RBAC objects: the apiserver is healthy without its %s check", clustercheck.RBACDefaultsHook)
	}
	return retry.Wait(ctx, "apiserver healthy on "+cp.env.file.Address, cp.wait, cp.env.log, func(ctx context.Context) error {
		err := clustercheck.APIServerReady(ctx, kube, except...)
		if err != nil && meanwhile != nil {
			meanwhile(ctx, kube)
		}
		return err
	})
}

// rbacAside are the readiness checks this boot does not wait for: the
// RBAC defaults' hook, on a master beside other etcd members (one that
// joins a cluster, or comes back in a multi-master one). The hook
// reconciles about 150 objects one quorum read at a time, and with a
// peer to ask each read takes about a second on loaded masters: minutes
// on a joining master, and on masters restored after a whole-cluster
// cut, whose controller-manager and scheduler would wait all that
// while. The cluster has those defaults already, and the apiserver
// serves with them meanwhile. A lone master waits for the whole /readyz:
// its reads need no peer, so the hook is short, and a controller-manager
// and scheduler started beside it only slow the genesis's way to Ready.
func (cp *controlPlane) rbacAside() []string {
	if cp.etcdPeers {
		return []string{clustercheck.RBACDefaultsHook}
	}
	return nil
}
