package role

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/clustercheck"
	"github.com/kiln-project/kiln/etcdmember"
	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/manifests"
)

// stage is one step of a control plane brought back in order: its static
// pods start once what it waits for answers.
type stage struct {
	waitFor string // for the console: "etcd quorum on 10.0.0.1"
	ready   func(context.Context) error
	pods    []string
}

// restartStages are the stages after etcd of a control plane that existed
// before this boot: the apiserver once its local etcd member has quorum,
// the controller-manager and scheduler once the apiserver is ready.
// Started all at once after a whole-cluster power cut, they competed for
// the CPU of machines that were all starting: in the QEMU cluster both
// apiservers spent minutes in their post-start hooks and one exited when
// its IP allocation check timed out.
func (n *Node) restartStages(quorum func(context.Context) error, kube kubernetes.Interface) []stage {
	return []stage{
		{waitFor: "etcd quorum on " + n.file.Address, ready: quorum, pods: []string{"kube-apiserver"}},
		{waitFor: "apiserver healthy on " + n.file.Address, pods: []string{"kube-controller-manager", "kube-scheduler"},
			ready: func(ctx context.Context) error { return clustercheck.APIServerReady(ctx, kube) }},
	}
}

// startInOrder starts the kubelet with etcd and every static pod no stage
// holds, then each stage's pods once its wait is over. A wait that ends
// without an answer (its bound passed) starts the stage's pods anyway:
// they serve once what they need does, as they would have started all at
// once, and the node never stays without its apiserver.
func (n *Node) startInOrder(ctx context.Context, p manifests.Params, stages []stage) error {
	var held []string
	for _, s := range stages {
		held = append(held, s.pods...)
	}
	if err := n.takeOutStaticPods(held); err != nil {
		return err
	}
	if err := n.startNode(ctx, p, held); err != nil {
		return err
	}
	for _, s := range stages {
		if err := clustercheck.Wait(ctx, s.waitFor, n.Wait, n.Log, s.ready); err != nil {
			if ctx.Err() != nil {
				return err
			}
			n.Log("starting %s anyway: %s", strings.Join(s.pods, ", "), clustercheck.OneLine(err))
		}
		if err := n.writeStaticPods(p, s.pods); err != nil {
			return err
		}
		n.Log("started %s", strings.Join(s.pods, ", "))
	}
	return nil
}

// takeOutStaticPods removes the named pods' manifests, which the agent
// and the anchors render, from the kubelet's static pod directory before
// the kubelet starts, so that the kubelet does not start them from the
// last boot's files.
func (n *Node) takeOutStaticPods(pods []string) error {
	dir := n.path(manifests.StaticPodDir)
	removed := false
	for _, name := range pods {
		err := os.Remove(filepath.Join(dir, name+".yaml"))
		switch {
		case err == nil:
			removed = true
		case !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("taking %s out of %s until its turn: %w", name, manifests.StaticPodDir, err)
		}
	}
	if !removed {
		return nil
	}
	return atomicfile.SyncDir(dir)
}

// ownEtcdQuorum is a check that this node's etcd member reads through
// quorum, and the client to close after.
func (n *Node) ownEtcdQuorum() (func(context.Context) error, func(), error) {
	if n.EtcdQuorum != nil {
		return n.EtcdQuorum, func() {}, nil
	}
	cfg, err := n.etcdClientTLS()
	if err != nil {
		return nil, nil, err
	}
	c, err := etcdmember.Dial([]string{"https://" + net.JoinHostPort(n.file.Address, fmt.Sprint(n.etcdPort()))}, cfg)
	if err != nil {
		return nil, nil, err
	}
	return c.Quorum, func() { c.Close() }, nil
}
