// Package nodelabels carries the labels a kubelet may not set on its own
// Node: NodeRestriction refuses keys in the kubernetes.io and k8s.io
// namespaces (node-role.kubernetes.io/worker, say), so a worker asks for
// them in an annotation on its Node (Request), and a master's anchor
// applies them (Reconcile). A request is a worker's claim, not the site's
// word: a master applies only what the site gives that worker, as its own
// node file lists it (nodefile.NodeFile.WorkerLabels), and never the
// labels that mark the control plane or node isolation
// (node-restriction.kubernetes.io/).
package nodelabels

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/contract/nodefile"
)

// Annotation holds a Node's requested labels, as a JSON object.
const Annotation = "kiln.dev/requested-labels"

// KubeletMaySet reports whether a kubelet may set the label on its own
// Node: NodeRestriction refuses keys in the kubernetes.io and k8s.io
// namespaces except the kubelet.kubernetes.io and node.kubernetes.io ones.
func KubeletMaySet(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	if !ok {
		return true
	}
	for _, allowed := range []string{"kubelet.kubernetes.io", "node.kubernetes.io"} {
		if prefix == allowed || strings.HasSuffix(prefix, "."+allowed) {
			return true
		}
	}
	for _, restricted := range []string{"kubernetes.io", "k8s.io"} {
		if prefix == restricted || strings.HasSuffix(prefix, "."+restricted) {
			return false
		}
	}
	return true
}

// Applicable reports whether a master applies the requested key, and why not.
func Applicable(key string) (bool, string) {
	if why := nodefile.RefusedWorkerLabel(key); why != "" {
		return false, why
	}
	if KubeletMaySet(key) {
		return false, "the kubelet sets it itself"
	}
	return true, ""
}

// Request records labels on the node's own Node (a kubelet's credentials
// may annotate their own Node). An empty request is not written.
func Request(ctx context.Context, kube kubernetes.Interface, node string, labels map[string]string) error {
	if len(labels) == 0 {
		return nil
	}
	value, err := json.Marshal(labels)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{Annotation: string(value)}}})
	if err != nil {
		return err
	}
	if _, err := kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("requesting labels on node %s: %w", node, err)
	}
	return nil
}

// Reconciler applies, each pass, every Node's requested labels that are
// applicable, that the site gives that node with the same value, and
// that are not yet there; it names each refused label once.
type Reconciler struct {
	Kube kubernetes.Interface
	// Site returns the labels the site gives each worker that a kubelet
	// may not set, by node name: a master's node file's WorkerLabels,
	// read on every pass.
	Site    func() (map[string]map[string]string, error)
	Log     func(string, ...any)
	refused map[string]bool // node/key=value already named
}

// Reconcile makes one pass over the Nodes. A Node with an unreadable
// request is named in the error and the others are still done; when the
// site's labels cannot be read, nothing is applied.
func (r *Reconciler) Reconcile(ctx context.Context) error {
	if r.Site == nil {
		return errors.New("no site labels to check requests against: nothing applied")
	}
	site, err := r.Site()
	if err != nil {
		return fmt.Errorf("the site's labels: %w (nothing applied)", err)
	}
	nodes, err := r.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	var errs []error
	for _, node := range nodes.Items {
		raw, ok := node.Annotations[Annotation]
		if !ok {
			continue
		}
		var want map[string]string
		if err := json.Unmarshal([]byte(raw), &want); err != nil {
			errs = append(errs, fmt.Errorf("node %s: annotation %s: %w", node.Name, Annotation, err))
			continue
		}
		missing := map[string]string{}
		for _, k := range slices.Sorted(maps.Keys(want)) {
			if have, ok := node.Labels[k]; ok && have == want[k] {
				continue
			}
			if ok, why := Applicable(k); !ok {
				r.refuse(node.Name, k, want[k], why)
				continue
			}
			if why := notGiven(site, node.Name, k, want[k]); why != "" {
				r.refuse(node.Name, k, want[k], why)
				continue
			}
			missing[k] = want[k]
		}
		if len(missing) == 0 {
			continue
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": missing}})
		if err != nil {
			return err
		}
		if _, err := r.Kube.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("labelling node %s: %w", node.Name, err))
			continue
		}
		r.Log("node %s: applied requested labels %v", node.Name, missing)
	}
	return errors.Join(errs...)
}

// notGiven says why the site does not give node the label key=value, ""
// when it does.
func notGiven(site map[string]map[string]string, node, key, value string) string {
	given, known := site[node]
	have, ok := given[key]
	switch {
	case !known:
		return "this master's node file names no worker " + node + " (one added to the site after this master's config was made " +
			"gets its labels from a master that runs a config kiln gen made since, or from kubectl label)"
	case !ok:
		return "the site does not give " + node + " this label"
	case have != value:
		return fmt.Sprintf("the site gives %s the value %q, not %q", node, have, value)
	}
	return ""
}

func (r *Reconciler) refuse(node, key, value, why string) {
	if r.refused == nil {
		r.refused = map[string]bool{}
	}
	if id := node + "/" + key + "=" + value; !r.refused[id] {
		r.refused[id] = true
		r.Log("node %s: requested label %s=%s not applied: %s", node, key, value, why)
	}
}

// Run reconciles every interval until ctx ends, logging a failed pass.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) {
	for {
		if err := r.Reconcile(ctx); err != nil {
			r.Log("node labels: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
