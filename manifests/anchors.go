package manifests

import (
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kiln-project/kiln/contract/layout"
	"github.com/kiln-project/kiln/contract/nodefile"
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

// CatalogDir is the image's catalog directory, which anchors read, and
// AnchorBackupDir where an anchor's cleanup moves its manifest.
const (
	CatalogDir      = layout.LibDir
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
// and, under its own service account (endpoints: read; nodes: get, list,
// patch), applies the labels workers request; and one keeping the zone on
// every other node. One pod per master rather than one per component:
// after a whole-cluster power cut every kubelet starts its node's
// API-sourced pods at once against the first apiserver to answer, and
// each pod is a sandbox, a container and a Go program started on a
// machine that is also starting that apiserver. An anchor pod only keeps
// files; its preStop hook, run when the pod is deleted through the API
// (never on a power cut), moves the components' manifests to a backup
// directory, bounded by the grace period.
func Anchors(p Params) []runtime.Object {
	endpoints := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"endpoints"}, Verbs: []string{"get", "list", "watch"}}
	nodes := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "patch"}}
	objs := []runtime.Object{
		serviceAccount(OthersAnchor),
		clusterRole("kiln:anchor-discovery", []rbacv1.PolicyRule{endpoints}),
		clusterRoleBinding("kiln:anchor-discovery", "kiln:anchor-discovery", OthersAnchor),
		serviceAccount(MastersAnchor),
		clusterRole("kiln:anchor-control-plane", []rbacv1.PolicyRule{endpoints, nodes}),
		clusterRoleBinding("kiln:anchor-control-plane", "kiln:anchor-control-plane", MastersAnchor),
	}

	masters := anchorDaemonSet(p, MastersAnchor, MastersAnchorComponents)
	spec := &masters.Spec.Template.Spec
	spec.NodeSelector = map[string]string{MasterLabel: ""}
	c := &spec.Containers[0]
	c.Command = append(c.Command, "--apply-node-labels")
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

// anchorCommand is kiln anchor for the components, in order.
func anchorCommand(components []string) []string {
	cmd := []string{KilnInImage, "anchor"}
	for _, c := range components {
		cmd = append(cmd, "--component", c)
	}
	return cmd
}

func anchorDaemonSet(p Params, name string, components []string) *appsv1.DaemonSet {
	ds := daemonSet(p, name, name, p.Images.Kiln, append(anchorCommand(components), "--server", apiServerURL(p)), false)
	grace := int64(30)
	spec := &ds.Spec.Template.Spec
	spec.TerminationGracePeriodSeconds = &grace
	MountKilnBinary(spec)
	anchorMounts(spec, components)
	return ds
}

// anchorMounts are the host paths an anchor reads and writes, and
// nothing else: the node file, and the directories it keeps its files
// in. No anchor sees the PKI, the kubeconfigs or the stored Ignition
// config (/var/lib/kiln/config.ign, which holds every key the node has).
func anchorMounts(spec *corev1.PodSpec, components []string) {
	hostMount(spec, "node-file", nodefile.Path, true, corev1.HostPathFile)
	if slices.Contains(components, DiscoveryAnchor) {
		hostMount(spec, "dns", DNSDir, false, corev1.HostPathDirectory)
	}
	if !slices.ContainsFunc(components, func(c string) bool { return c != DiscoveryAnchor }) {
		return
	}
	hostMount(spec, "catalog", CatalogDir, true, corev1.HostPathDirectory)
	hostMount(spec, "manifests", StaticPodDir, false, corev1.HostPathDirectory)
	hostMount(spec, "manifests-backup", AnchorBackupDir, false, corev1.HostPathDirectoryOrCreate)
	if slices.Contains(components, "etcd") {
		hostMount(spec, "etcd-config", EtcdConfigDir, false, corev1.HostPathDirectory)
	}
}
