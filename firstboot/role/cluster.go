package role

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
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

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/clustercheck"
)

// cluster is a master's agent access to the apiservers (system:masters:
// it binds the operator's group before anything else can).
type cluster struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
	log  func(format string, args ...any)
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
	"Role":               {rbacv1.SchemeGroupVersion.WithResource("roles"), true},
	"RoleBinding":        {rbacv1.SchemeGroupVersion.WithResource("rolebindings"), true},

	"ValidatingAdmissionPolicy":        {admissionv1.SchemeGroupVersion.WithResource("validatingadmissionpolicies"), false},
	"ValidatingAdmissionPolicyBinding": {admissionv1.SchemeGroupVersion.WithResource("validatingadmissionpolicybindings"), false},
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
		err = retry.Wait(ctx, what, 2*time.Minute, nil, func(ctx context.Context) error {
			_, err := ri.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: manifests.FieldOwner, Force: true})
			if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
				return retry.Final(err) // retrying cannot fix the object
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	c.log("add-ons applied: %d objects (cluster-admins binding, removed-nodes policy, kiln-net CNI, kube-proxy, cluster DNS, anchors)", len(objs))
	return nil
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

// labelNode marks a node a master (the label the anchors select) and
// applies its site labels and taints.
func (c *cluster) labelNode(ctx context.Context, name string, labels map[string]string, taints []corev1.Taint, bound time.Duration) error {
	all := map[string]string{manifests.MasterLabel: "", manifests.RoleLabel: nodefile.RoleMaster}
	maps.Copy(all, labels)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": all}})
	if err != nil {
		return err
	}
	return retry.Wait(ctx, "node "+name+" registered and labelled", bound, c.log, func(ctx context.Context) error {
		node, err := c.kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: manifests.FieldOwner})
		if err != nil || len(taints) == 0 {
			return err
		}
		for _, t := range taints {
			if !slices.ContainsFunc(node.Spec.Taints, func(h corev1.Taint) bool { return h.MatchTaint(&t) }) {
				node.Spec.Taints = append(node.Spec.Taints, t)
			}
		}
		_, err = c.kube.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{FieldManager: manifests.FieldOwner})
		return err
	})
}

// validatePod runs a pod of the kiln image on node that resolves the
// kubernetes service through cluster DNS, and reads its logs back:
// scheduling, the CNI, kube-proxy, cluster DNS and the kubelet's log
// access all work. The pod is scheduled (a node selector, not a node
// name) but only onto node: on a slow machine a master that joined
// during the genesis node's validation had the pod, and its kubelet,
// busy starting its own control plane, left it pending for minutes.
func (c *cluster) validatePod(ctx context.Context, image, domain, node string, dnsRetry, bound time.Duration) error {
	name := "kubernetes." + "default.svc." + domain
	dns := "cluster DNS (kube-system/" + manifests.ClusterDNSService + ") with a ready endpoint"
	err := retry.Wait(ctx, dns, bound, c.log, func(ctx context.Context) error {
		return clustercheck.ServiceReady(ctx, c.kube, metav1.NamespaceSystem, manifests.ClusterDNSService)
	})
	if err != nil {
		return err
	}
	pod := clustercheck.CheckPod("kiln-validate", image, "", "dns", "--retry", dnsRetry.String(), name)
	pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	ended, logs, err := clustercheck.RunPod(ctx, c.kube, pod, bound, c.log)
	if err != nil {
		return fmt.Errorf("validation pod: %w", err)
	}
	phase := ended.Status.Phase
	if phase != corev1.PodSucceeded || !strings.Contains(logs, "resolved "+name) {
		c.log("the cluster when validation failed:\n%s%s", clustercheck.Describe(ctx, c.kube),
			clustercheck.PodLogs(ctx, c.kube, metav1.NamespaceSystem, manifests.ClusterDNSSelector, 30))
		return fmt.Errorf("validation pod %s: %s", phase, retry.OneLine(errors.New(logs)))
	}
	c.log("validated: a pod ran on the cluster, resolved %s, and its logs read back: %s", name, clustercheck.LastLine(logs))
	return nil
}
