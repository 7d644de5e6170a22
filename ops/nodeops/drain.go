package nodeops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kiln-project/kiln/internal/retry"
)

// podKind is what the drain does with a pod, as kubectl drain decides.
type podKind int

const (
	evict     podKind = iota
	daemonSet         // left: its DaemonSet would put it back
	static            // left: a mirror of a static pod, the kubelet's own
	localData         // refused without DeleteEmptyDirData
	unmanaged         // refused without EvictUnmanaged
)

// classify sorts a pod on the node being drained. A finished pod is
// evicted whatever it holds: nothing runs there any more.
func (o Options) classify(p corev1.Pod) podKind {
	if _, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		return static
	}
	ctrl := metav1.GetControllerOf(&p)
	if ctrl != nil && ctrl.Kind == "DaemonSet" {
		return daemonSet
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return evict
	}
	if ctrl == nil && !o.EvictUnmanaged {
		return unmanaged
	}
	if !o.DeleteEmptyDirData {
		for _, v := range p.Spec.Volumes {
			if v.EmptyDir != nil {
				return localData
			}
		}
	}
	return evict
}

func podName(p corev1.Pod) string { return p.Namespace + "/" + p.Name }

// podsOn lists the pods bound to node (the field selector, and a filter
// for clients that ignore it).
func (r *Remover) podsOn(ctx context.Context, node string) ([]corev1.Pod, error) {
	l, err := r.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return nil, fmt.Errorf("listing the pods on %s: %w", node, err)
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.Spec.NodeName == node {
			out = append(out, p)
		}
	}
	return out, nil
}

// drainPass is one look at the node's pods: what it left in place, what
// it refuses, and which evictable pods are still there.
type drainPass struct {
	kept, refused, left []string
	evictable           []corev1.Pod
}

func (r *Remover) look(ctx context.Context, node string) (drainPass, error) {
	pods, err := r.podsOn(ctx, node)
	if err != nil {
		return drainPass{}, err
	}
	var d drainPass
	for _, p := range pods {
		switch r.classify(p) {
		case daemonSet:
			d.kept = append(d.kept, podName(p)+" (DaemonSet)")
		case static:
			d.kept = append(d.kept, podName(p)+" (static pod)")
		case localData:
			d.refused = append(d.refused, podName(p)+" (emptyDir data: --delete-emptydir-data evicts it, and the data is lost)")
		case unmanaged:
			d.refused = append(d.refused, podName(p)+" (no controller re-creates it: --evict-unmanaged evicts it for good)")
		default:
			d.evictable = append(d.evictable, p)
		}
	}
	return d, nil
}

// drain evicts the node's pods through the eviction API, within the
// timeout, as kubectl drain does: DaemonSet pods and static pods stay,
// pods with emptyDir data or without a controller are refused unless
// the options allow them. A Ready node with refused pods fails at once,
// naming them, before anything is evicted. When the timeout passes and
// the node is not Ready (down: its kubelet cannot stop the pods), the
// drain is skipped with a message and the removal goes on; the pods
// still bound to it go with the Node.
func (r *Remover) drain(ctx context.Context, n *node, log Logf) error {
	if n.obj == nil {
		log("no Node %s in the cluster: nothing to drain", n.name)
		return nil
	}
	first, err := r.look(ctx, n.name)
	if err != nil {
		return err
	}
	if len(first.kept) > 0 {
		log("left in place, as kubectl drain does: %s", strings.Join(first.kept, ", "))
	}
	ready := readyOf(n.obj)
	if len(first.refused) > 0 {
		if ready == "Ready" {
			return fmt.Errorf("nothing evicted, these pods on %s cannot be: %s. %s stays cordoned (kubectl uncordon %s undoes that)",
				n.name, strings.Join(first.refused, "; "), n.name, n.name)
		}
		log("%s is not Ready (Ready=%s); not evicting: %s", n.name, ready, strings.Join(first.refused, "; "))
	}
	if len(first.evictable) == 0 {
		log("no pod on %s to evict", n.name)
		return nil
	}
	timeout := cmp.Or(r.Timeout, DefaultTimeout)
	evicted := map[types.UID]bool{}
	last := first
	err = retry.Wait(ctx, fmt.Sprintf("the pods on %s evicted and gone", n.name), timeout, log, func(ctx context.Context) error {
		d, err := r.look(ctx, n.name)
		if err != nil {
			return err
		}
		held := r.evictAll(ctx, d.evictable, evicted, log)
		if last, err = r.look(ctx, n.name); err != nil {
			return err
		}
		return stillThere(last.evictable, held)
	})
	if err == nil {
		log("drained %s: %d evicted", n.name, len(evicted))
		return nil
	}
	if ctx.Err() != nil {
		return err
	}
	return r.afterBound(ctx, n, last, timeout, err, log)
}

// evictAll asks to evict every pod not yet terminating; it returns why
// the pods it could not evict are held, by name.
func (r *Remover) evictAll(ctx context.Context, pods []corev1.Pod, evicted map[types.UID]bool, log Logf) map[string]string {
	held := map[string]string{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		err := r.Kube.CoreV1().Pods(p.Namespace).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
		switch {
		case apierrors.IsNotFound(err):
		case apierrors.IsTooManyRequests(err):
			held[podName(p)] = "a disruption budget holds it: " + retry.OneLine(err)
		case err != nil:
			held[podName(p)] = retry.OneLine(err)
		case !evicted[p.UID]:
			evicted[p.UID] = true
			log("evicted %s", podName(p))
		}
	}
	return held
}

// stillThere is nil when no evictable pod is left, else names each with
// its state.
func stillThere(pods []corev1.Pod, held map[string]string) error {
	if len(pods) == 0 {
		return nil
	}
	var left []string
	for _, p := range pods {
		why := held[podName(p)]
		switch {
		case why != "":
		case p.DeletionTimestamp != nil:
			why = "terminating"
		default:
			why = "not evicted yet"
		}
		left = append(left, podName(p)+" ("+why+")")
	}
	return fmt.Errorf("%d pods left: %s", len(left), strings.Join(left, ", "))
}

// afterBound decides what a drain that ran out of time means: on a node
// that is not Ready the drain is skipped; on a Ready one it fails.
func (r *Remover) afterBound(ctx context.Context, n *node, last drainPass, timeout time.Duration, waitErr error, log Logf) error {
	obj, err := r.Kube.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		log("Node %s is gone: nothing left to drain", n.name)
		n.obj = nil
		return nil
	}
	if err != nil {
		return errors.Join(waitErr, fmt.Errorf("reading Node %s: %w", n.name, err))
	}
	n.obj = obj
	if ready := readyOf(obj); ready != "Ready" {
		var still []string
		for _, p := range last.evictable {
			if p.DeletionTimestamp != nil {
				still = append(still, podName(p)+" (terminating)")
			} else {
				still = append(still, podName(p))
			}
		}
		still = append(still, last.refused...)
		log("%s is not Ready (Ready=%s: down, its kubelet cannot stop its pods); skipping the drain after %s. Still on it: %s. "+
			"They are deleted with the Node, and their controllers start them elsewhere",
			n.name, ready, timeout, orNone(still))
		return nil
	}
	return fmt.Errorf("%w. The node is Ready: find what holds the pods (a disruption budget, a stuck finalizer), then run kiln node remove again, perhaps with a longer --timeout", waitErr)
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
