package role

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/nodefile"
)

// cluster is the genesis node's admin access to its own apiserver,
// through the discovery name like every other client.
type cluster struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
	log  func(format string, args ...any)
}

func (n *Node) client() (*cluster, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", n.path(nodefile.KubeconfigDir+"/admin.conf"))
	if err != nil {
		return nil, fmt.Errorf("the admin kubeconfig: %w", err)
	}
	cfg.Timeout = 30 * time.Second
	return newCluster(cfg, n.Log)
}

func newCluster(cfg *rest.Config, log func(string, ...any)) (*cluster, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &cluster{kube: kube, dyn: dyn, log: log}, nil
}

// poll calls try every interval until it reports done, an error that is
// final, or the bound passes; it says what it waits for every 30 s.
func (c *cluster) poll(ctx context.Context, what string, bound time.Duration, try func(context.Context) (bool, error)) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var last error
	lastReport := start
	for {
		done, err := try(ctx)
		if done {
			c.log("%s: after %s", what, time.Since(start).Round(time.Second))
			return nil
		}
		last = err
		if time.Since(lastReport) >= 30*time.Second {
			lastReport = time.Now()
			c.log("waiting for %s (%s so far; last: %v)", what, time.Since(start).Round(time.Second), oneLine(last))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: gave up after %s: %v", what, bound, oneLine(last))
		case <-time.After(2 * time.Second):
		}
	}
}

func oneLine(err error) string {
	if err == nil {
		return "not yet"
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}

func (c *cluster) waitHealthy(ctx context.Context, bound time.Duration) error {
	return c.poll(ctx, "apiserver healthy", bound, func(ctx context.Context) (bool, error) {
		body, err := c.kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, err
		}
		return bytes.Equal(bytes.TrimSpace(body), []byte("ok")), fmt.Errorf("readyz: %s", body)
	})
}

// resources maps the kinds kiln applies to their API resources: the
// add-ons are a fixed list, so no discovery is needed.
var resources = map[string]struct {
	gvr        schema.GroupVersionResource
	namespaced bool
}{
	"ServiceAccount":     {schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, true},
	"ConfigMap":          {schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, true},
	"Service":            {schema.GroupVersionResource{Version: "v1", Resource: "services"}, true},
	"DaemonSet":          {appsv1.SchemeGroupVersion.WithResource("daemonsets"), true},
	"Deployment":         {appsv1.SchemeGroupVersion.WithResource("deployments"), true},
	"ClusterRole":        {rbacv1.SchemeGroupVersion.WithResource("clusterroles"), false},
	"ClusterRoleBinding": {rbacv1.SchemeGroupVersion.WithResource("clusterrolebindings"), false},
}

// applyAddOns server-side applies every add-on object, retrying each
// (the apiserver may still be settling its RBAC) within the bound.
func (c *cluster) applyAddOns(ctx context.Context, p manifests.Params) error {
	objs := manifests.AddOns(p)
	for _, o := range objs {
		u, err := toUnstructured(o)
		if err != nil {
			return err
		}
		r, ok := resources[u.GetKind()]
		if !ok {
			return fmt.Errorf("add-on %s/%s: kind %s has no resource mapping", u.GetNamespace(), u.GetName(), u.GetKind())
		}
		var ri dynamic.ResourceInterface = c.dyn.Resource(r.gvr)
		if r.namespaced {
			ri = c.dyn.Resource(r.gvr).Namespace(u.GetNamespace())
		}
		what := fmt.Sprintf("apply %s %s", u.GetKind(), u.GetName())
		var final error
		err = c.quietPoll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
			_, err := ri.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: manifests.FieldOwner, Force: true})
			if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
				final = err // retrying cannot fix the object
				return true, nil
			}
			return err == nil, err
		})
		if final != nil {
			err = final
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	c.log("add-ons applied: %d objects (kiln-net CNI, kube-proxy, cluster DNS, anchors)", len(objs))
	return nil
}

// quietPoll is poll without progress lines, for short retried calls.
func (c *cluster) quietPoll(ctx context.Context, bound time.Duration, try func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for {
		done, err := try(ctx)
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up after %s: %v", bound, oneLine(err))
		case <-time.After(2 * time.Second):
		}
	}
}

func toUnstructured(o runtime.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "spec", "template", "metadata", "creationTimestamp")
	return u, nil
}

// labelNode marks the genesis node a master: the label the anchors and
// later the master role select.
func (c *cluster) labelNode(ctx context.Context, name string, bound time.Duration) error {
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"",%q:"master"}}}`, manifests.MasterLabel, manifests.RoleLabel)
	return c.poll(ctx, "node "+name+" registered and labelled", bound, func(ctx context.Context) (bool, error) {
		_, err := c.kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: manifests.FieldOwner})
		return err == nil, err
	})
}

// waitNodeReady waits for the node's Ready condition reported by this
// boot's kubelet: after a power cut the stored condition still says Ready
// until the node controller notices, so a heartbeat from before since
// does not count.
func (c *cluster) waitNodeReady(ctx context.Context, name string, since time.Time, bound time.Duration) error {
	return c.poll(ctx, "node "+name+" Ready", bound, func(ctx context.Context) (bool, error) {
		node, err := c.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				fresh := !cond.LastHeartbeatTime.Time.Before(since.Add(-time.Second))
				return cond.Status == corev1.ConditionTrue && fresh, fmt.Errorf("Ready=%s (heartbeat %s): %s", cond.Status, cond.LastHeartbeatTime.UTC().Format(time.RFC3339), cond.Message)
			}
		}
		return false, fmt.Errorf("no Ready condition yet")
	})
}

// validate runs a pod of the kiln image that resolves the kubernetes
// service through cluster DNS, and reads its logs back: scheduling, the
// CNI, kube-proxy, cluster DNS and the kubelet's log access all work.
func (c *cluster) validate(ctx context.Context, image, domain string, bound time.Duration) error {
	name := "kubernetes." + "default.svc." + domain
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kiln-validate", Namespace: "default", Labels: map[string]string{"app.kubernetes.io/managed-by": "kiln"}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Tolerations:   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "dns", Image: image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/kiln", "check", "dns", "--retry", "60s", name}}},
		},
	}
	pods := c.kube.CoreV1().Pods("default")
	_ = pods.Delete(ctx, pod.Name, metav1.DeleteOptions{})
	err := c.quietPoll(ctx, bound, func(ctx context.Context) (bool, error) {
		_, err := pods.Create(ctx, pod, metav1.CreateOptions{FieldManager: manifests.FieldOwner})
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("creating the validation pod: %w", err)
	}
	var phase corev1.PodPhase
	err = c.poll(ctx, "validation pod kiln-validate finished", bound, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, fmt.Errorf("phase %s on %q", phase, p.Spec.NodeName)
	})
	if err != nil {
		return err
	}
	logs, err := pods.GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("reading the validation pod's logs: %w", err)
	}
	if phase != corev1.PodSucceeded || !strings.Contains(string(logs), "resolved "+name) {
		return fmt.Errorf("validation pod %s: %s", phase, oneLine(fmt.Errorf("%s", logs)))
	}
	c.log("validated: a pod ran on the cluster, resolved %s, and its logs read back: %s", name, lastLine(string(logs)))
	if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// lastLine is a log's final line: the check's answer, after any retries.
func lastLine(logs string) string {
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	return lines[len(lines)-1]
}
