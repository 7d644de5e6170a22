package nodeops

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Drainer is kiln node remove's cordon and drain for one Node, for the
// other operator commands that take a node out of service for a while
// (kiln upgrade's rollout), and the uncordon that brings it back.
type Drainer struct {
	Kube kubernetes.Interface
	// Options: the drain's Timeout and what it may evict
	// (DeleteEmptyDirData, EvictUnmanaged); LeaveTimeout is not used.
	Options
}

// Cordon marks Node name unschedulable, as the removal's cordon step.
func (d Drainer) Cordon(ctx context.Context, name string, log Logf) error {
	n, err := d.node(ctx, name)
	if err != nil {
		return err
	}
	return d.remover().cordon(ctx, n, log)
}

// Drain evicts the pods on Node name, as the removal's drain step: a
// Ready node with pods it may not evict is refused, naming them, before
// anything is evicted.
func (d Drainer) Drain(ctx context.Context, name string, log Logf) error {
	n, err := d.node(ctx, name)
	if err != nil {
		return err
	}
	return d.remover().drain(ctx, n, log)
}

// Uncordon marks Node name schedulable again.
func (d Drainer) Uncordon(ctx context.Context, name string, log Logf) error {
	n, err := d.node(ctx, name)
	switch {
	case err != nil:
		return err
	case n.obj == nil:
		return fmt.Errorf("uncordoning Node %s: no such Node in the cluster", name)
	case !n.obj.Spec.Unschedulable:
		log("Node %s was not cordoned", name)
		return nil
	}
	patch := []byte(`{"spec":{"unschedulable":null}}`)
	if _, err := d.Kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("uncordoning Node %s: %w", name, err)
	}
	log("uncordoned Node %s", name)
	return nil
}

func (d Drainer) remover() *Remover { return &Remover{Kube: d.Kube, Options: d.Options} }

// node is Node name as the removal's steps see it; obj is nil when the
// cluster has no such Node.
func (d Drainer) node(ctx context.Context, name string) (*node, error) {
	obj, err := d.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return &node{name: name}, nil
	case err != nil:
		return nil, fmt.Errorf("reading Node %s: %w", name, err)
	}
	return &node{name: name, obj: obj}, nil
}
