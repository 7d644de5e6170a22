package manifests

import (
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kiln-project/kiln/contract/layout"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/removednodes"
)

// AnchoredComponents are the control-plane components an anchor keeps on
// every master, and DiscoveryAnchor the one that keeps the zone.
var AnchoredComponents = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

const DiscoveryAnchor = "discovery"

// The anchor DaemonSets: MastersAnchor keeps every anchored component and
// the zone on the masters and applies the labels workers request;
// OthersAnchor keeps the zone on every other node.
const (
	MastersAnchor = "kiln-anchor-control-plane"
	OthersAnchor  = "kiln-anchor-discovery"
)

// MastersAnchorComponents are what the masters' anchor keeps, in the
// order its cleanup stops them: etcd last, since its cleanup waits for
// the member's removal.
var MastersAnchorComponents = append(
	slices.DeleteFunc(slices.Clone(AnchoredComponents), func(c string) bool { return c == "etcd" }),
	"etcd", DiscoveryAnchor)

// CatalogFile is the image's catalog, which the masters' anchor reads,
// and AnchorBackupDir where an anchor's cleanup moves its manifest.
const (
	CatalogFile     = layout.LibDir + "/images.json"
	AnchorBackupDir = "/var/lib/kiln/manifests-backup"
)

// EtcdMemberRemovedMarker is written by a master's kiln-leave once it
// has removed the master's own etcd member; the etcd anchor's cleanup
// moves etcd's manifest only when it is there, so a master whose anchor
// pod is deleted (its master label removed) never stops a member that
// still counts toward the quorum.
const EtcdMemberRemovedMarker = AnchorBackupDir + "/etcd-member-removed"

// Anchors are two DaemonSets: one on the masters (by label) whose single
// pod keeps every anchored component's static pod and the discovery zone
// and, under its own service account (mastersAnchorRules), applies the
// labels workers request that the site gives them, approves the
// kubelets' serving certificate requests the site vouches for and keeps
// the credentials of removed nodes admitted back across their rotation;
// and one keeping
// the zone on every other node. Both read the one Endpoints object the zone comes from,
// default/kubernetes, and no other (DiscoveryRole). One pod per master
// rather than one per component: after a whole-cluster power cut every
// kubelet starts its node's API-sourced pods at once against the first
// apiserver to answer, and each pod is a sandbox, a container and a Go
// program started on a machine that is also starting that apiserver. An
// anchor pod only keeps files; its preStop hook, run when the pod is
// deleted through the API (never on a power cut), moves the components'
// manifests to a backup directory, bounded by the grace period.
func Anchors(p Params) []runtime.Object {
	objs := []runtime.Object{
		serviceAccount(OthersAnchor),
		serviceAccount(MastersAnchor),
		DiscoveryRole(),
		roleBinding(DiscoveryRoleName, DiscoveryNamespace, DiscoveryRoleName, OthersAnchor, MastersAnchor),
		clusterRole("kiln:anchor-control-plane", mastersAnchorRules),
		clusterRoleBinding("kiln:anchor-control-plane", "kiln:anchor-control-plane", MastersAnchor),
		RemovedNodesRole(),
		roleBinding(RemovedNodesRoleName, removednodes.Namespace, RemovedNodesRoleName, MastersAnchor),
	}

	masters := anchorDaemonSet(p, MastersAnchor, MastersAnchorComponents)
	spec := &masters.Spec.Template.Spec
	spec.NodeSelector = map[string]string{MasterLabel: ""}
	c := &spec.Containers[0]
	c.Command = append(c.Command, "--apply-node-labels", "--approve-serving-certs", "--keep-removed-nodes")
	c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
		Command: append(anchorCommand(MastersAnchorComponents), "--cleanup", "--timeout", "20s")}}}

	others := anchorDaemonSet(p, OthersAnchor, []string{DiscoveryAnchor})
	others.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: MasterLabel, Operator: corev1.NodeSelectorOpDoesNotExist}},
		}}},
	}}
	return append(objs, masters, others)
}

// mastersAnchorRules are the masters' anchor's rights beyond the
// discovery Endpoints.
var mastersAnchorRules = []rbacv1.PolicyRule{
	// The labels workers request, applied when the site gives them; the
	// Nodes' addresses a DHCP node's serving request is checked against.
	{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "patch"}},
	// The kubelets' certificate requests: serving ones to answer, client
	// ones whose issued certificates an admitted removed node's entry
	// follows (--keep-removed-nodes).
	{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"get", "list", "watch"}},
	// Approval or denial of the serving requests, for that signer alone
	// (the controller-manager signs).
	{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests/approval"}, Verbs: []string{"update"}},
	{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"signers"}, ResourceNames: []string{"kubernetes.io/kubelet-serving"}, Verbs: []string{"approve"}},
}

// The Endpoints object the discovery zone is made from, and the Role
// that reads it.
const (
	DiscoveryNamespace = "default"
	DiscoveryEndpoints = "kubernetes"
	DiscoveryRoleName  = "kiln:anchor-discovery"
)

// DiscoveryRole lets its holders get the kubernetes Endpoints by name,
// and nothing else: not another Endpoints object, not a list or a watch
// (a list is refused under resourceNames unless it selects the name with
// a field selector, and the anchor only gets the object).
func DiscoveryRole() *rbacv1.Role {
	return &rbacv1.Role{
		TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "Role"),
		ObjectMeta: namespacedRBACMeta(DiscoveryRoleName, DiscoveryNamespace),
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"endpoints"},
			ResourceNames: []string{DiscoveryEndpoints}, Verbs: []string{"get"}}},
	}
}

// RemovedNodesRoleName is the Role that lets the masters' anchor keep
// the removed-nodes list.
const RemovedNodesRoleName = "kiln:anchor-removed-nodes"

// RemovedNodesRole lets its holders read and update the removed-nodes
// ConfigMap by name, and no other ConfigMap. Not create: resourceNames
// cannot restrict a create, and kiln node remove creates the list with
// the operator's credentials; not list or watch: the anchor gets the
// one object.
func RemovedNodesRole() *rbacv1.Role {
	return &rbacv1.Role{
		TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "Role"),
		ObjectMeta: namespacedRBACMeta(RemovedNodesRoleName, removednodes.Namespace),
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
			ResourceNames: []string{removednodes.Name}, Verbs: []string{"get", "update"}}},
	}
}

// anchorCommand is kiln anchor for the components, in order.
func anchorCommand(components []string) []string {
	cmd := []string{KilnInImage, "anchor"}
	for _, c := range components {
		cmd = append(cmd, "--component", c)
	}
	return cmd
}

// anchorDaemonSet is an anchor's DaemonSet, confined with no capability:
// an anchor reads and writes root's files under the directories it
// mounts, and talks to the apiserver.
func anchorDaemonSet(p Params, name string, components []string) *appsv1.DaemonSet {
	ds := daemonSet(p, name, name, p.Images.Kiln, append(anchorCommand(components), "--server", apiServerURL(p)))
	grace := int64(30)
	spec := &ds.Spec.Template.Spec
	spec.TerminationGracePeriodSeconds = &grace
	MountKilnBinary(spec)
	anchorMounts(spec, components)
	return ds
}

// anchorMounts are the host paths an anchor reads and writes, and
// nothing else: the node file, the image's catalog, and the directories
// it keeps its files in. No anchor sees the PKI, the kubeconfigs, the
// stored Ignition config (/var/lib/kiln/config.ign) or one the image
// carries (/usr/lib/kiln/config.ign), which hold every key the node has.
func anchorMounts(spec *corev1.PodSpec, components []string) {
	// The node file, read-only: the discovery name, what the control
	// plane's pods are rendered from, and on a master the labels the
	// site gives each worker.
	hostMount(spec, "node-file", nodefile.Path, true, corev1.HostPathFile)
	if slices.Contains(components, DiscoveryAnchor) {
		// The node-local CoreDNS's directory, where it writes the zone.
		hostMount(spec, "dns", DNSDir, false, corev1.HostPathDirectory)
	}
	if !slices.ContainsFunc(components, func(c string) bool { return c != DiscoveryAnchor }) {
		return
	}
	// The image's catalog, read-only: the images the static pods run.
	// The file, not its directory, which may hold an embedded config.
	hostMount(spec, "catalog", CatalogFile, true, corev1.HostPathFile)
	// The static pod directory, where it writes the components' pods.
	hostMount(spec, "manifests", StaticPodDir, false, corev1.HostPathDirectory)
	// Where its cleanup moves the pods, and where kiln-leave marks the
	// removal of this master's etcd member.
	hostMount(spec, "manifests-backup", AnchorBackupDir, false, corev1.HostPathDirectoryOrCreate)
	if slices.Contains(components, "etcd") {
		// etcd's configuration directory: it writes etcd.conf.yaml there,
		// rendered from the membership record beside it.
		hostMount(spec, "etcd-config", EtcdConfigDir, false, corev1.HostPathDirectory)
	}
}
