package nodeops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/retry"
)

// DefaultLeaveTimeout bounds the wait for a running node to stop.
const DefaultLeaveTimeout = 2 * time.Minute

// markRemoved tells the node to leave: its kiln-leave service stops the
// kubelet and every pod once the Node carries the mark. It comes after
// the etcd member is gone, so a master's etcd never stops while it is
// still a member.
func (r *Remover) markRemoved(ctx context.Context, n *node, log Logf) error {
	if n.obj == nil {
		log("no Node %s in the cluster: nothing to mark", n.name)
		return nil
	}
	if at, ok := n.obj.Annotations[nodefile.RemovedAnnotation]; ok {
		log("Node %s was already marked removed (%s)", n.name, at)
		return nil
	}
	at := r.now().UTC().Format(time.RFC3339)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{nodefile.RemovedAnnotation: at}}})
	obj, err := r.Kube.CoreV1().Nodes().Patch(ctx, n.name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		log("Node %s is gone: nothing to mark", n.name)
		n.obj = nil
		return nil
	}
	if err != nil {
		return fmt.Errorf("marking Node %s removed: %w", n.name, err)
	}
	n.obj = obj
	log("marked Node %s removed (%s=%s): the node stops its kubelet and pods and stays out until re-imaged", n.name, nodefile.RemovedAnnotation, at)
	return nil
}

// waitLeft waits, within its bound, for a Ready node to answer that it
// stopped; a node that is down cannot, and is told by the mark no more:
// deleting its Node removes the mark, so if it boots again with its
// state disk, its kubelet runs its pods, though the removed-nodes list
// keeps it from registering the Node again.
func (r *Remover) waitLeft(ctx context.Context, n *node, log Logf) error {
	if n.obj == nil {
		log("no Node %s in the cluster: nothing to wait for", n.name)
		return nil
	}
	if ready := readyOf(n.obj); ready != "Ready" {
		log("%s is not Ready (Ready=%s): not waiting for it to stop. Keep it powered off, or re-image it: "+
			"booted again with its state disk, its kubelet would register the Node again", n.name, ready)
		return nil
	}
	bound := r.LeaveTimeout
	if bound == 0 {
		bound = DefaultLeaveTimeout
	}
	var gone bool
	var readErr error
	err := retry.WaitEvery(ctx, "Node "+n.name+" to say it stopped", bound, r.pollInterval(), nil, func(ctx context.Context) error {
		obj, err := r.Kube.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			log("Node %s is gone", n.name)
			gone = true
			return nil
		case err != nil:
			readErr = fmt.Errorf("reading Node %s: %w", n.name, err)
			return retry.Final(readErr)
		}
		if at, ok := obj.Annotations[nodefile.LeftAnnotation]; ok {
			log("%s stopped its kubelet and pods at %s", n.name, at)
			return nil
		}
		return errNotLeft
	})
	switch {
	case err == nil:
		if gone {
			n.obj = nil
		}
		return nil
	case readErr != nil:
		return readErr
	case ctx.Err() != nil:
		return ctx.Err()
	}
	log("%s did not say it stopped within %s (an image without kiln-leave, or its apiserver unreachable): "+
		"power it off or re-image it: its kubelet may still run its pods, though it can no longer register the Node", n.name, bound)
	return nil
}

// errNotLeft is why waitLeft reads the Node again.
var errNotLeft = errors.New("no " + nodefile.LeftAnnotation + " yet")

func (r *Remover) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Remover) pollInterval() time.Duration {
	if r.PollInterval > 0 {
		return r.PollInterval
	}
	return 2 * time.Second
}
