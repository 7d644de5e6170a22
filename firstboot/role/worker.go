package role

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
		return rejected(clustercheck.NodeReady(ctx, kube, n.file.Name, n.started))
	})
}

// rejected makes an answer that no retry changes final: the cluster
// refuses this node's client certificate, or the apiserver's certificate
// is not from this node's CA (the node belongs to another site's PKI).
func rejected(err error) error {
	var unknownCA x509.UnknownAuthorityError
	switch {
	case apierrors.IsUnauthorized(err):
		return clustercheck.Final(fmt.Errorf("%w: %w", errCertRejected, err))
	case errors.As(err, &unknownCA):
		return clustercheck.Final(fmt.Errorf("the apiserver's certificate is not from this site's CA: %w", err))
	}
	return err
}
