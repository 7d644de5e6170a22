package role

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// asMaster owns the phases a master (genesis included) runs against its
// own apiserver, which the apiserver phase found ready, as the agent:
// the add-ons, its labels and taints, its Ready, the validation pod.
type asMaster struct {
	env   nodeEnv
	api   clients
	local nodeLocal
	cni   *podNetwork
	wait  time.Duration
}

// applyAddOns applies the add-ons through this master's apiserver.
func (m asMaster) applyAddOns(ctx context.Context) error {
	c, err := m.api.agent(m.env.file.Address)
	if err != nil {
		return err
	}
	return c.applyAddOns(ctx, m.env.params(etcdmember.Membership{}))
}

// labelSelf gives this node's Node the master label, its site labels
// and its taints.
func (m asMaster) labelSelf(ctx context.Context) error {
	c, err := m.api.agent(m.env.file.Address)
	if err != nil {
		return err
	}
	var taints []corev1.Taint
	for _, t := range m.env.file.Taints {
		taints = append(taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	return c.labelNode(ctx, m.env.file.Name, m.env.file.Labels, taints, m.wait)
}

// waitSelfReady waits until this node's Node is Ready, seeing meanwhile
// to its CNI file and node-local address.
func (m asMaster) waitSelfReady(ctx context.Context) error {
	c, err := m.api.agent(m.env.file.Address)
	if err != nil {
		return err
	}
	keep := m.local.keep()
	return retry.Wait(ctx, "node "+m.env.file.Name+" Ready", m.wait, m.env.log, func(ctx context.Context) error {
		err := m.cni.selfReady(ctx, c.kube)
		if err != nil {
			keep(ctx) // the kubelet reaches the apiservers through it
		}
		return err
	})
}

// validate runs the validation pod on this node.
func (m asMaster) validate(ctx context.Context) error {
	c, err := m.api.agent(m.env.file.Address)
	if err != nil {
		return err
	}
	dnsRetry := manifests.TimingFor(m.env.file.Cluster.Timing).DNSCheck
	return c.validatePod(ctx, m.env.cat.Manifests().Kiln, m.env.file.Cluster.Domain, m.env.file.Name, dnsRetry, m.wait)
}
