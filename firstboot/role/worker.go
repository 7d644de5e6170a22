package role

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/nodelabels"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// workerPhases start the kubelet and wait until the node is Ready, as
// the kubelet's own credentials see it (a node may read its own Node);
// then the node asks for the labels its kubelet may not set, and the
// first time all that is done the join is stamped.
func (n *Node) workerPhases() []phase {
	return []phase{
		{Name: "start", Run: func(ctx context.Context) error {
			return n.startNode(ctx, n.params(etcdmember.Membership{}), nil)
		}},
		{Name: "node-ready", Run: n.waitReadyAsKubelet},
		{Name: "publish-version", Run: n.publishVersion},
		{Name: "request-labels", Once: true, Run: n.requestLabels},
		{Name: "joined", Once: true, Run: func(context.Context) error { return nil }},
	}
}

// kubeletClient talks to the cluster as this node's kubelet.
func (n *Node) kubeletClient() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", n.path(nodefile.KubeconfigDir+"/kubelet.conf"))
	if err != nil {
		return nil, fmt.Errorf("the kubelet kubeconfig: %w", err)
	}
	cfg.Timeout = 30 * time.Second
	return kubernetes.NewForConfig(cfg)
}

func (n *Node) waitReadyAsKubelet(ctx context.Context) error {
	kube, err := n.kubeletClient()
	if err != nil {
		return err
	}
	keep := n.keepNodeLocalAddress()
	return retry.Wait(ctx, "node "+n.file.Name+" Ready", n.Wait, n.Log, func(ctx context.Context) error {
		err := rejected(n.selfReady(ctx, kube))
		if err != nil {
			keep(ctx) // this client and the kubelet reach the apiservers through it
		}
		return err
	})
}

// requestLabels annotates the Node with the site's labels NodeRestriction
// keeps a kubelet from setting (node-role.kubernetes.io/worker, ...); a
// master's controller-manager anchor applies them.
func (n *Node) requestLabels(ctx context.Context) error {
	r := n.restrictedLabels()
	if len(r) == 0 {
		return nil
	}
	kube, err := n.kubeletClient()
	if err != nil {
		return err
	}
	err = retry.Wait(ctx, "labels requested on node "+n.file.Name, n.Wait, n.Log, func(ctx context.Context) error {
		return rejected(nodelabels.Request(ctx, kube, n.file.Name, r))
	})
	if err == nil {
		n.Log("labels %v requested; a master applies them (NodeRestriction forbids a kubelet setting them)", r)
	}
	return err
}

// rejected makes an answer that no retry changes final: the cluster
// refuses this node's client certificate, or the apiserver's certificate
// is not from this node's CA (the node belongs to another site's PKI).
func rejected(err error) error {
	var unknownCA x509.UnknownAuthorityError
	switch {
	case apierrors.IsUnauthorized(err):
		return retry.Final(fmt.Errorf("%w: %w", errCertRejected, err))
	case errors.As(err, &unknownCA):
		return retry.Final(fmt.Errorf("the apiserver's certificate is not from this site's CA: %w", err))
	}
	return err
}

// publishVersionBound bounds publishing the version: kiln node list's
// column is not worth holding a boot for.
const publishVersionBound = 2 * time.Minute

// publishVersion annotates the node's own Node with the kiln version it
// runs (nodefile.VersionAnnotation), as its kubelet (NodeRestriction lets
// a kubelet annotate its own Node), on every boot: a re-imaged machine
// shows its new image. A failure is said and does not fail the role.
func (n *Node) publishVersion(ctx context.Context) error {
	if n.Version == "" {
		return nil
	}
	kube, err := n.kubeletClient()
	if err == nil {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{nodefile.VersionAnnotation: n.Version}}})
		err = retry.Wait(ctx, "kiln version published on node "+n.file.Name, publishVersionBound, n.Log, func(ctx context.Context) error {
			_, err := kube.CoreV1().Nodes().Patch(ctx, n.file.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			if apierrors.IsForbidden(err) {
				return retry.Final(err) // no retry changes a refusal
			}
			return rejected(err)
		})
	}
	if err != nil {
		n.Log("the kiln version is not on Node %s (kiln node list shows none): %v", n.file.Name, err)
	}
	return nil
}
