// Package clustercheck holds what tells whether a kiln cluster works (an
// apiserver ready, a Node Ready from this boot, every kube-system pod
// running, a name resolved through cluster DNS from a pod); the node
// roles, the QEMU tests and the bench wait for them through retry.Wait.
package clustercheck

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// RBACDefaultsHook is the apiserver's readiness check for the post-start
// hook that reconciles Kubernetes' default roles and bindings, on every
// start. The cluster a master joins has them already, and the apiserver
// serves with them meanwhile; the hook's 140-odd quorum reads take
// minutes on a loaded master whose etcd quorum has a busy peer.
const RBACDefaultsHook = "poststarthook/rbac/bootstrap-roles"

// APIServerReady is nil when the apiserver's /readyz says ok, the
// readiness checks named in except (such as RBACDefaultsHook) aside.
func APIServerReady(ctx context.Context, kube kubernetes.Interface, except ...string) error {
	req := kube.Discovery().RESTClient().Get().AbsPath("/readyz")
	for _, check := range except {
		req = req.Param("exclude", check)
	}
	body, err := req.DoRaw(ctx)
	if err != nil {
		return err
	}
	if !bytes.Equal(bytes.TrimSpace(body), []byte("ok")) {
		return fmt.Errorf("readyz: %s", body)
	}
	return nil
}

// NodeReady is nil when the node's Ready condition is True and its
// kubelet reported it at since or later: after a power cut the stored
// condition says Ready until the node controller notices, so a heartbeat
// from before since does not count (a second of clock skew is allowed).
func NodeReady(ctx context.Context, kube kubernetes.Interface, name string, since time.Time) error {
	n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return NodeIsReady(n, since)
}

// NodeIsReady is NodeReady's verdict on a Node already read.
func NodeIsReady(n *corev1.Node, since time.Time) error {
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == corev1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(since.Add(-time.Second)) {
			return nil
		}
		return fmt.Errorf("node %s: Ready=%s (heartbeat %s): %s", n.Name, c.Status, c.LastHeartbeatTime.UTC().Format(time.RFC3339), c.Message)
	}
	return fmt.Errorf("node %s has no Ready condition yet", n.Name)
}

// KubeSystemRunning is nil when every kube-system pod is Running with
// all its containers ready and started at since or later, and there are
// at least min of them. After a power cut the stored pod status still
// says Running until the kubelet reports again; since filters that out.
func KubeSystemRunning(ctx context.Context, kube kubernetes.Interface, min int, since time.Time) error {
	pods, err := kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var bad []string
	for _, p := range pods.Items {
		if why := notRunning(p, since); why != "" {
			bad = append(bad, p.Name+": "+why)
		}
	}
	if len(pods.Items) < min || len(bad) > 0 {
		return fmt.Errorf("%d kube-system pods (want at least %d), not running: %v", len(pods.Items), min, bad)
	}
	return nil
}

func notRunning(p corev1.Pod, since time.Time) string {
	if p.Status.Phase != corev1.PodRunning {
		return string(p.Status.Phase)
	}
	if len(p.Status.ContainerStatuses) == 0 {
		return "no container status"
	}
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case !c.Ready:
			return c.Name + " not ready"
		case c.State.Running == nil:
			return c.Name + " not running"
		case c.State.Running.StartedAt.Time.Before(since.Truncate(time.Second)):
			return c.Name + " started before " + since.UTC().Format(time.RFC3339)
		}
	}
	return ""
}

// ServiceReady is nil when an EndpointSlice of the Service
// namespace/name lists a ready endpoint: the Service answers.
func ServiceReady(ctx context.Context, kube kubernetes.Interface, namespace, name string) error {
	list, err := kube.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + name})
	if err != nil {
		return err
	}
	total := 0
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			total++
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				return nil
			}
		}
	}
	return fmt.Errorf("service %s/%s: no ready endpoint (%d not ready)%s", namespace, name, total, endpointWriter(ctx, kube))
}

// endpointWriter says, for a Service without a ready endpoint, when the
// controller-manager that writes every Service's endpoints has been
// restarting: on a slow machine with the default timing profile it lost
// its leader lease again and again, and the Service stayed empty for as
// long while its pods ran. It says nothing when the controller-manager
// runs unrestarted or its pods cannot be read.
func endpointWriter(ctx context.Context, kube kubernetes.Interface) string {
	pods, err := kube.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "component=" + controllerManager})
	if err != nil {
		return ""
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			last := c.LastTerminationState.Terminated
			if c.RestartCount == 0 || last == nil {
				continue
			}
			return fmt.Sprintf("; %s, which writes the endpoints, restarted %d time(s) on %s (last exit code %d at %s): "+
				"if its log says it lost its leader lease, this machine is slow for the site's timing profile (cluster.timing: slow, docs/timing.md)",
				controllerManager, c.RestartCount, p.Spec.NodeName, last.ExitCode, last.FinishedAt.UTC().Format(time.TimeOnly))
		}
	}
	return ""
}

const controllerManager = "kube-controller-manager"

// PodLogs is the last lines of every container of the pods in namespace
// that selector picks, each headed by the pod's name; what cannot be
// read is said in its place.
func PodLogs(ctx context.Context, kube kubernetes.Interface, namespace, selector string, lines int64) string {
	pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return fmt.Sprintf("pods %s in %s: %v\n", selector, namespace, err)
	}
	var b strings.Builder
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			data, err := kube.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: &lines}).DoRaw(ctx)
			if err != nil {
				fmt.Fprintf(&b, "--- %s/%s: %v\n", p.Name, c.Name, err)
				continue
			}
			fmt.Fprintf(&b, "--- %s/%s (last %d lines)\n%s\n", p.Name, c.Name, lines, strings.TrimSpace(string(data)))
		}
	}
	return b.String()
}

// CheckPod is a pod of the kiln image that runs one `kiln check`
// command (args after "check") and ends, tolerating every taint; on
// node, when one is named. It runs the node's kiln
// (manifests.MountKilnBinary).
func CheckPod(name, image, node string, args ...string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app.kubernetes.io/managed-by": "kiln"}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			NodeName:      node,
			Tolerations:   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "check", Image: image, ImagePullPolicy: corev1.PullNever,
				Command: append([]string{manifests.KilnInImage, "check"}, args...)}},
		},
	}
	manifests.MountKilnBinary(&pod.Spec)
	// kiln check resolves names and makes and answers HTTP requests on
	// ports above 1024: no capability.
	manifests.Confine(&pod.Spec)
	return pod
}

// RunPod creates pod (replacing one of the same name), waits within
// bound for it to end, and returns it as it ended and its logs (each of
// the three steps within bound); the pod is deleted afterwards.
func RunPod(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, bound time.Duration, log retry.Logf) (*corev1.Pod, string, error) {
	pods := kube.CoreV1().Pods(pod.Namespace)
	_ = pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	err := retry.Wait(ctx, "creating pod "+pod.Name, bound, nil, func(ctx context.Context) error {
		// A create the apiserver took but answered too late for the
		// client is found on the retry.
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	defer pods.Delete(context.WithoutCancel(ctx), pod.Name, metav1.DeleteOptions{})
	ended := pod
	err = retry.Wait(ctx, "pod "+pod.Name+" finished", bound, log, func(ctx context.Context) error {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return retry.Final(err)
		}
		if err != nil {
			return err
		}
		ended = p
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			return nil
		}
		return fmt.Errorf("phase %s on %q", p.Status.Phase, p.Spec.NodeName)
	})
	if err != nil {
		return ended, "", err
	}
	// The apiserver fetches logs from the node's kubelet: a busy node or
	// apiserver fails that now and then, so it is retried too, within the
	// caller's bound (a fixed two minutes failed a genesis role whose
	// apiserver, loaded by a master's join, timed out for longer).
	var logs []byte
	err = retry.Wait(ctx, "reading pod "+pod.Name+"'s logs", bound, log, func(ctx context.Context) (err error) {
		logs, err = pods.GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		return err
	})
	return ended, string(logs), err
}

// LastLine is a log's final line: a check's answer, after any retries.
func LastLine(logs string) string {
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	return lines[len(lines)-1]
}

// Describe is what an operator reads first when a check fails: the
// nodes' Ready conditions, every pod with its phase, restarts and node,
// and the latest events, one line each.
func Describe(ctx context.Context, kube kubernetes.Interface) string {
	var b strings.Builder
	describeNodes(ctx, kube, &b)
	describePods(ctx, kube, &b)
	describeEvents(ctx, kube, &b)
	return b.String()
}

func describeNodes(ctx context.Context, kube kubernetes.Interface, b *strings.Builder) {
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(b, "nodes: %v\n", err)
		return
	}
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				fmt.Fprintf(b, "node %s Ready=%s heartbeat=%s podCIDR=%s labels=%v %s\n", n.Name, c.Status,
					c.LastHeartbeatTime.UTC().Format(time.RFC3339), n.Spec.PodCIDR, n.Labels, c.Message)
			}
		}
	}
}

func describePods(ctx context.Context, kube kubernetes.Interface, b *strings.Builder) {
	pods, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(b, "pods: %v\n", err)
		return
	}
	for _, p := range pods.Items {
		restarts := int32(0)
		var states []string
		for _, c := range p.Status.ContainerStatuses {
			restarts += c.RestartCount
			switch {
			case c.State.Waiting != nil:
				states = append(states, c.Name+"=waiting:"+c.State.Waiting.Reason)
			case c.State.Terminated != nil:
				states = append(states, c.Name+"=terminated:"+c.State.Terminated.Reason)
			case c.State.Running != nil:
				states = append(states, c.Name+"=running@"+c.State.Running.StartedAt.UTC().Format(time.RFC3339))
			}
		}
		fmt.Fprintf(b, "pod %s/%s %s node=%s ip=%s restarts=%d %v\n", p.Namespace, p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.PodIP, restarts, states)
	}
}

func describeEvents(ctx context.Context, kube kubernetes.Interface, b *strings.Builder) {
	events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(b, "events: %v\n", err)
		return
	}
	items := events.Items
	sort.Slice(items, func(i, j int) bool { return items[i].LastTimestamp.Before(&items[j].LastTimestamp) })
	if len(items) > 40 {
		items = items[len(items)-40:]
	}
	for _, e := range items {
		fmt.Fprintf(b, "event %s %s/%s %s: %s\n", e.LastTimestamp.UTC().Format(time.RFC3339), e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
	}
}
