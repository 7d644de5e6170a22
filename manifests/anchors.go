package manifests

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kiln-project/kiln/nodefile"
)

// AnchoredComponents are the control-plane components an anchor keeps on
// every master, and DiscoveryAnchor the one that keeps the zone.
var AnchoredComponents = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

const DiscoveryAnchor = "discovery"

// NodeLabelsAnchor is the anchor that also applies the labels workers
// request on their Nodes (nodelabels), from every master.
const NodeLabelsAnchor = "kube-controller-manager"

// CatalogDir is the image's catalog directory, which anchors read, and
// AnchorBackupDir where an anchor's cleanup moves its manifest.
const (
	CatalogDir      = "/usr/lib/kiln"
	AnchorBackupDir = "/var/lib/kiln/manifests-backup"
)

// EtcdMemberRemovedMarker is written by a master's kiln-leave once it
// has removed the master's own etcd member; the etcd anchor's cleanup
// moves etcd's manifest only when it is there, so a master whose anchor
// pods are deleted (its master label removed) never stops a member that
// still counts toward the quorum.
const EtcdMemberRemovedMarker = AnchorBackupDir + "/etcd-member-removed"

// Anchors are one DaemonSet per anchored component on the masters (by
// label), and the discovery anchor on every node. The controller-manager's
// anchor, under its own service account (nodes: get, list, patch), also
// applies the labels workers request. An anchor pod only
// keeps files; its preStop hook, run when the pod is deleted through the
// API (never on a power cut), moves the component's manifest to a backup
// directory, bounded by the grace period.
func Anchors(p Params) []runtime.Object {
	objs := []runtime.Object{
		serviceAccount("kiln-anchor"),
		clusterRole("kiln:anchor", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"endpoints"}, Verbs: []string{"get", "list", "watch"}}}),
		clusterRoleBinding("kiln:anchor", "kiln:anchor", "kiln-anchor"),
		serviceAccount("kiln-node-labels"),
		clusterRole("kiln:node-labels", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "patch"}}}),
		clusterRoleBinding("kiln:node-labels", "kiln:node-labels", "kiln-node-labels"),
	}
	for _, c := range AnchoredComponents {
		ds := anchorDaemonSet(p, c)
		spec := &ds.Spec.Template.Spec
		spec.NodeSelector = map[string]string{MasterLabel: ""}
		if c == NodeLabelsAnchor {
			spec.ServiceAccountName = "kiln-node-labels"
			spec.Containers[0].Command = append(spec.Containers[0].Command, "--apply-node-labels")
		}
		spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
			Command: []string{KilnInImage, "anchor", "--component", c, "--cleanup", "--timeout", "20s"}}}}
		objs = append(objs, ds)
	}
	return append(objs, anchorDaemonSet(p, DiscoveryAnchor))
}

func anchorDaemonSet(p Params, component string) *appsv1.DaemonSet {
	ds := daemonSet(p, "kiln-anchor-"+component, "kiln-anchor", p.Images.Kiln,
		[]string{KilnInImage, "anchor", "--component", component, "--server", apiServerURL(p)}, false)
	grace := int64(30)
	spec := &ds.Spec.Template.Spec
	spec.TerminationGracePeriodSeconds = &grace
	MountKilnBinary(spec)
	anchorMounts(spec, component)
	return ds
}

// anchorMounts are the host paths an anchor reads and writes, and
// nothing else: the node file, and the directories it keeps its files
// in. No anchor sees the PKI, the kubeconfigs or the stored Ignition
// config (/var/lib/kiln/config.ign, which holds every key the node has).
func anchorMounts(spec *corev1.PodSpec, component string) {
	hostMount(spec, "node-file", nodefile.Path, true, corev1.HostPathFile)
	if component == DiscoveryAnchor {
		hostMount(spec, "dns", DNSDir, false, corev1.HostPathDirectory)
		return
	}
	hostMount(spec, "catalog", CatalogDir, true, corev1.HostPathDirectory)
	hostMount(spec, "manifests", StaticPodDir, false, corev1.HostPathDirectory)
	hostMount(spec, "manifests-backup", AnchorBackupDir, false, corev1.HostPathDirectoryOrCreate)
	if component == "etcd" {
		hostMount(spec, "etcd-config", EtcdConfigDir, false, corev1.HostPathDirectory)
	}
}
