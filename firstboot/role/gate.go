package role

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/node/etcdmember"
	"github.com/kiln-project/kiln/node/healthgate"
)

// Gate checks this boot against the health gate (node/healthgate): the
// Node read as this node's kubelet, and on a master its own etcd member
// and its own apiserver. It is asked after Run, once the node file is
// loaded; bootID is this boot's. Its error names the unmet conditions,
// most telling first, without the node's name: it becomes the reason a
// trying boot failed, which the boot-state record keeps short.
func (n *Node) Gate(ctx context.Context, bootID string) error {
	if n.file == nil {
		return errors.New("the role has not loaded the node file")
	}
	u := n.units()
	kube, err := u.kubelet.api.kubelet()
	if err != nil {
		return err
	}
	g := healthgate.Gate{Kube: kube}
	t := healthgate.Target{Node: n.file.Name, Role: n.file.Role, Boot: healthgate.ThisBoot(bootID),
		Since: n.started, RoleDone: healthgate.Known(bootID)}
	if r := n.file.Role; r == nodefile.RoleGenesis || r == nodefile.RoleMaster {
		cfg, err := u.env.etcdClientTLS()
		if err != nil {
			return err
		}
		c, err := etcdmember.Dial([]string{"https://" + net.JoinHostPort(n.file.Address, fmt.Sprint(u.plane.port))}, cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		own, err := u.plane.api.kubeAt(n.file.Address)
		if err != nil {
			return err
		}
		g.Etcd = c
		g.APIServer = healthgate.APIServerFunc(func(ctx context.Context, _ string) error {
			return clustercheck.APIServerReady(ctx, own, u.plane.rbacAside()...)
		})
	}
	err = g.Check(ctx, t)
	var unmet *healthgate.Unmet
	if errors.As(err, &unmet) {
		return errors.New(unmet.Reasons())
	}
	return err
}

// PublishRoleDone publishes this boot as the one the role is done on
// (nodefile.RoleDoneAnnotation), after Run with DeferRoleDone.
func (n *Node) PublishRoleDone(ctx context.Context) error {
	if n.file == nil {
		return errors.New("the role has not loaded the node file")
	}
	return n.units().kubelet.roleDone(ctx)
}
