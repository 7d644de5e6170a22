package role

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kiln-project/kiln/clustercheck"
	"github.com/kiln-project/kiln/etcdmember"
	"github.com/kiln-project/kiln/nodefile"
)

// workerPhases start the kubelet and wait until the node is Ready, as
// the kubelet's own credentials see it (a node may read its own Node);
// the first time it is, the join is stamped done.
func (n *Node) workerPhases() []phase {
	return []phase{
		{name: "start", run: func(ctx context.Context) error {
			if r := n.restrictedLabels(); len(r) > 0 {
				n.Log("labels %v are applied by a master (NodeRestriction forbids a kubelet setting them)", r)
			}
			return n.startNode(ctx, n.params(etcdmember.Membership{}), allPods)
		}},
		{name: "node-ready", run: n.waitReadyAsKubelet},
		{name: "joined", once: true, run: func(context.Context) error { return nil }},
	}
}

func (n *Node) waitReadyAsKubelet(ctx context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", n.path(nodefile.KubeconfigDir+"/kubelet.conf"))
	if err != nil {
		return fmt.Errorf("the kubelet kubeconfig: %w", err)
	}
	cfg.Timeout = 30 * time.Second
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return clustercheck.Wait(ctx, "node "+n.file.Name+" Ready", n.Wait, n.Log, func(ctx context.Context) error {
		return clustercheck.NodeReady(ctx, kube, n.file.Name, n.started)
	})
}
