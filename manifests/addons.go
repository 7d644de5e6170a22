package manifests

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"

	"github.com/kiln-project/kiln/contract/discovery"
	"github.com/kiln-project/kiln/contract/nodefile"
)

// Labels the add-ons and anchors select nodes by.
const (
	MasterLabel = "node-role.kubernetes.io/control-plane"
	RoleLabel   = "kiln.dev/role"
	FieldOwner  = "kiln"
	saDir       = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// AddOns are the cluster objects the genesis node installs once the
// apiserver answers, in the order they are applied:
//   - the binding of the operator's cluster-admins group to cluster-admin,
//     first, so admin.kubeconfig works once the genesis node is done;
//   - the binding that lets kubelets renew their client certificates, and
//     the admission policy that refuses that, and Node writes, to the
//     nodes kiln node remove took out (removedNodes);
//   - kiln-net, the CNI: a DaemonSet of the kiln image that writes each
//     node's bridge + host-local conflist from the pod CIDR the
//     controller-manager gave the Node (the reference plugins baked into
//     the image do the work), and keeps the routes to the other nodes' pod
//     CIDRs and the forwarding and masquerading rules (no overlay, since
//     kiln's nodes share L2);
//   - kube-proxy (iptables mode, the node's nft-backed iptables);
//   - cluster DNS: CoreDNS answering cluster.local at the clusterDNS address;
//   - the anchors (see Anchors).
//
// The infrastructure pods (kiln-net, kube-proxy) run on the host network
// and resolve the apiserver's discovery name through the node-local
// CoreDNS; ordinary pods never get that resolver.
func AddOns(p Params) []runtime.Object {
	objs := []runtime.Object{clusterAdmins(), nodeClientRotation()}
	objs = append(objs, removedNodes()...)
	objs = append(objs, kilnNet(p)...)
	objs = append(objs, kubeProxy(p)...)
	objs = append(objs, clusterDNS(p)...)
	return append(objs, Anchors(p)...)
}

// Marshal renders objects as one multi-document YAML stream.
func Marshal(objs []runtime.Object) ([]byte, error) {
	var out []byte
	for _, o := range objs {
		data, err := yaml.Marshal(o)
		if err != nil {
			return nil, err
		}
		out = append(append(out, "---\n"...), data...)
	}
	return out, nil
}

func meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: "kube-system", Labels: map[string]string{"app.kubernetes.io/managed-by": "kiln", "k8s-app": name}}
}

func typeMeta(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

func serviceAccount(name string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{TypeMeta: typeMeta("v1", "ServiceAccount"), ObjectMeta: meta(name)}
}

// clusterMeta is meta for cluster-scoped RBAC objects, whose names
// (kiln:net) are not label values.
func clusterMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/managed-by": "kiln"}}
}

func clusterRoleBinding(name, role, sa string) *rbacv1.ClusterRoleBinding {
	m := clusterMeta(name)
	return &rbacv1.ClusterRoleBinding{
		TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ObjectMeta: m,
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: "kube-system"}},
	}
}

// namespacedRBACMeta is clusterMeta for a Role or RoleBinding in ns.
func namespacedRBACMeta(name, ns string) metav1.ObjectMeta {
	m := clusterMeta(name)
	m.Namespace = ns
	return m
}

// roleBinding binds the Role role in ns to kube-system's service
// accounts sas.
func roleBinding(name, ns, role string, sas ...string) *rbacv1.RoleBinding {
	b := &rbacv1.RoleBinding{
		TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "RoleBinding"), ObjectMeta: namespacedRBACMeta(name, ns),
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role},
	}
	for _, sa := range sas {
		b.Subjects = append(b.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: "kube-system"})
	}
	return b
}

func groupBinding(name, role, group string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ObjectMeta: clusterMeta(name),
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: "rbac.authorization.k8s.io", Name: group}},
	}
}

// clusterAdmins binds the group of the operator's admin credential to
// cluster-admin, as kubeadm binds kubeadm:cluster-admins.
func clusterAdmins() *rbacv1.ClusterRoleBinding {
	return groupBinding(nodefile.ClusterAdminsGroup, "cluster-admin", nodefile.ClusterAdminsGroup)
}

// NodeClientRotationRole is the built-in role whose holders'
// certificate requests for their own node client certificate the
// controller-manager's csrapproving controller approves by itself.
const NodeClientRotationRole = "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"

// nodeClientRotation lets every kubelet renew its client certificate
// (rotateCertificates in its config) before it expires: the request is
// approved automatically and signed with the cluster CA by the
// controller-manager, as kubeadm's node-autoapprove-certificate-rotation.
func nodeClientRotation() *rbacv1.ClusterRoleBinding {
	return groupBinding("kiln:node-client-cert-rotation", NodeClientRotationRole, "system:nodes")
}

func clusterRole(name string, rules []rbacv1.PolicyRule) *rbacv1.ClusterRole {
	m := clusterMeta(name)
	return &rbacv1.ClusterRole{TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: m, Rules: rules}
}

// nodeLocalDNS is the resolver of host-network infrastructure pods: the
// node-local CoreDNS, which knows the discovery name.
func nodeLocalDNS(p Params) (corev1.DNSPolicy, *corev1.PodDNSConfig) {
	return corev1.DNSNone, &corev1.PodDNSConfig{Nameservers: []string{discovery.NodeLocalAddress}}
}

// daemonSet is a host-network, node-critical DaemonSet that tolerates
// every taint (it is what makes a node usable), confined with no
// capability (podsecurity.go) unless its caller says otherwise.
func daemonSet(p Params, name, sa, image string, cmd []string) *appsv1.DaemonSet {
	policy, dnsConfig := nodeLocalDNS(p)
	labels := map[string]string{"k8s-app": name}
	return &appsv1.DaemonSet{
		TypeMeta: typeMeta("apps/v1", "DaemonSet"), ObjectMeta: meta(name),
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: sa, HostNetwork: true, DNSPolicy: policy, DNSConfig: dnsConfig,
					PriorityClassName: "system-node-critical",
					SecurityContext:   podSecurity(),
					Tolerations:       []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name: name, Image: image, ImagePullPolicy: corev1.PullNever, Command: cmd,
						Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
						SecurityContext: confined(),
						Resources:       requests(name, ""),
					}},
				},
			},
		},
	}
}

// MountKilnBinary gives a pod of the kiln image its program: the node's
// own kiln binary, read-only at /kiln. The kiln image carries only
// kiln-net's tools, so it changes with the node's packages, not with
// every change to kiln: it is in the image's containerd seed, and a first
// boot imports nothing. Each node runs the kiln it was imaged with, so
// nodes imaged from different builds share the same DaemonSets.
func MountKilnBinary(spec *corev1.PodSpec) {
	hostMountAt(spec, "kiln", nodefile.KilnBinary, KilnInImage, true, corev1.HostPathFile)
}

// KilnInImage is where a pod of the kiln image finds kiln.
const KilnInImage = "/kiln"

func hostMount(spec *corev1.PodSpec, name, path string, readOnly bool, kind corev1.HostPathType) {
	hostMountAt(spec, name, path, path, readOnly, kind)
}

// hostMountAt mounts the host's path at mountPath in the pod's container.
func hostMountAt(spec *corev1.PodSpec, name, path, mountPath string, readOnly bool, kind corev1.HostPathType) {
	spec.Volumes = append(spec.Volumes, corev1.Volume{
		Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &kind}},
	})
	c := &spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: mountPath, ReadOnly: readOnly})
}

// CNIConfDir is where kiln-net writes the node's conflist.
const CNIConfDir = "/etc/cni/net.d"

// kilnNet keeps each node's conflist, its routes to the other nodes' pod
// CIDRs and its iptables rules for the cluster pod CIDR (see package
// kilnnet): on the host network, with NET_ADMIN and NET_RAW rather than
// privileged, and the host's xtables lock shared with kube-proxy.
func kilnNet(p Params) []runtime.Object {
	ds := daemonSet(p, "kiln-net", "kiln-net", p.Images.Kiln, []string{KilnInImage, "net", "--server", apiServerURL(p),
		"--cluster-cidr=" + p.Node.Cluster.PodCIDR})
	spec := &ds.Spec.Template.Spec
	// NET_ADMIN: ip route changes the host's routes, iptables-restore
	// its netfilter rules. NET_RAW: iptables may open a raw socket to
	// ask the kernel which revisions of a match or target it has.
	spec.Containers[0].SecurityContext = confined("NET_ADMIN", "NET_RAW")
	MountKilnBinary(spec)
	// The CNI configuration directory, where it writes the node's
	// conflist.
	hostMount(spec, "cni", CNIConfDir, false, corev1.HostPathDirectoryOrCreate)
	// The host-wide lock iptables -w waits on (with the legacy
	// backend; the nft backend has the kernel serialise changes), so
	// that kiln-net's, kube-proxy's and the host's changes never
	// interleave.
	hostMount(spec, "xtables-lock", XtablesLock, false, corev1.HostPathFileOrCreate)
	return []runtime.Object{
		serviceAccount("kiln-net"),
		clusterRole("kiln:net", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}}),
		clusterRoleBinding("kiln:net", "kiln:net", "kiln-net"),
		ds,
	}
}

func apiServerURL(p Params) string {
	return fmt.Sprintf("https://%s:%d", p.Node.Cluster.DiscoveryName, p.Node.Cluster.APIServerPort)
}

// serviceAccountKubeconfig points a pod at the discovery name with its
// service account token. kube-proxy needs it because the service VIP
// does not work before kube-proxy does; cluster DNS so that it does not
// wait for kube-proxy.
func serviceAccountKubeconfig(p Params, user string) string {
	cfg := clientcmdapi.Config{
		APIVersion: "v1", Kind: "Config",
		Clusters:       []clientcmdapi.NamedCluster{{Name: "kiln", Cluster: clientcmdapi.Cluster{Server: apiServerURL(p), CertificateAuthority: saDir + "/ca.crt"}}},
		AuthInfos:      []clientcmdapi.NamedAuthInfo{{Name: user, AuthInfo: clientcmdapi.AuthInfo{TokenFile: saDir + "/token"}}},
		Contexts:       []clientcmdapi.NamedContext{{Name: "kiln", Context: clientcmdapi.Context{Cluster: "kiln", AuthInfo: user}}},
		CurrentContext: "kiln",
	}
	data, _ := yaml.Marshal(cfg)
	return string(data)
}

// XtablesLock is the host's iptables lock.
const XtablesLock = "/run/xtables.lock"

// kubeProxy is kube-proxy in iptables mode, privileged: at start it
// writes kernel parameters, net.netfilter.nf_conntrack_max (and the
// conntrack hash size under /sys/module) and the conntrack TCP timeouts
// with its default configuration, and net.ipv4.conf.all.route_localnet
// for NodePorts on 127.0.0.1, and fails to start when it cannot. The
// runtime mounts /proc/sys and /sys read-only in every container that is
// not privileged, whatever its capabilities. A privileged container has
// every capability and, under containerd, no seccomp profile.
func kubeProxy(p Params) []runtime.Object {
	cm := &corev1.ConfigMap{TypeMeta: typeMeta("v1", "ConfigMap"), ObjectMeta: meta("kube-proxy"),
		Data: map[string]string{"kubeconfig.conf": serviceAccountKubeconfig(p, "kube-proxy")}}
	ds := daemonSet(p, "kube-proxy", "kube-proxy", p.Images.Proxy, []string{
		"/usr/local/bin/kube-proxy", "--kubeconfig=/var/lib/kube-proxy/kubeconfig.conf",
		"--cluster-cidr=" + p.Node.Cluster.PodCIDR, "--hostname-override=$(NODE_NAME)", "--proxy-mode=iptables",
	})
	spec := &ds.Spec.Template.Spec
	privileged := true
	spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &privileged}
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-proxy"}}}})
	spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "kube-proxy", MountPath: "/var/lib/kube-proxy"})
	// The lock kiln-net's iptables also waits on (see kilnNet).
	hostMount(spec, "xtables-lock", XtablesLock, false, corev1.HostPathFileOrCreate)
	// The host's kernel modules, read-only, as upstream's kube-proxy
	// mounts them: iptables of the legacy backend (a prebuilt kube-proxy
	// image may choose it) loads ip_tables through modprobe where the
	// image has one. kiln's image carries the nft backend, whose modules
	// the kernel loads by itself.
	hostMount(spec, "lib-modules", "/lib/modules", true, corev1.HostPathDirectory)
	return []runtime.Object{
		serviceAccount("kube-proxy"),
		clusterRoleBinding("kiln:kube-proxy", "system:node-proxier", "kube-proxy"),
		cm, ds,
	}
}

// Cluster DNS reads its Corefile and its kubeconfig from its ConfigMap,
// mounted at clusterDNSConfigDir.
const (
	clusterDNSConfigDir  = "/etc/coredns"
	clusterDNSKubeconfig = "kubeconfig.conf"
)

// ClusterCorefile is the cluster DNS configuration. Its kubernetes
// plugin reaches the apiservers through the discovery name, as kube-proxy
// does, not through the kubernetes Service: that VIP works only once
// kube-proxy has written its rules, and on a one-vCPU master kube-proxy
// can start a minute after cluster DNS, which would wait for it ("waiting
// for Kubernetes API before starting server").
func ClusterCorefile(p Params) string {
	c := p.Node.Cluster
	fwd := "" // air-gapped: a site with no resolvers answers cluster names only
	if len(c.UpstreamDNS) > 0 {
		fwd = "    forward . " + strings.Join(c.UpstreamDNS, " ") + "\n    loop\n"
	}
	return fmt.Sprintf(`.:53 {
    errors
    health
    ready
    kubernetes %s in-addr.arpa ip6.arpa {
        kubeconfig %s kiln
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
%s    cache 30
    reload
}
`, c.Domain, clusterDNSConfigDir+"/"+clusterDNSKubeconfig, fwd)
}

// ClusterDNSService is the cluster DNS Service in kube-system, and
// ClusterDNSSelector selects its CoreDNS pods.
const (
	ClusterDNSService  = "kube-dns"
	ClusterDNSSelector = "k8s-app=kube-dns"
)

func clusterDNS(p Params) []runtime.Object {
	labels := map[string]string{"k8s-app": ClusterDNSService}
	cm := &corev1.ConfigMap{TypeMeta: typeMeta("v1", "ConfigMap"), ObjectMeta: meta("coredns"),
		Data: map[string]string{"Corefile": ClusterCorefile(p), clusterDNSKubeconfig: serviceAccountKubeconfig(p, "coredns")}}
	one := int32(1)
	// Cluster DNS resolves the discovery name (its kubeconfig's server)
	// through the node-local CoreDNS; the names it forwards go to the
	// site's resolvers named in its Corefile, not through this resolver.
	policy, dnsConfig := nodeLocalDNS(p)
	dep := &appsv1.Deployment{
		TypeMeta: typeMeta("apps/v1", "Deployment"), ObjectMeta: meta("coredns"),
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: "coredns", DNSPolicy: policy, DNSConfig: dnsConfig,
					PriorityClassName: "system-cluster-critical",
					SecurityContext:   podSecurity(),
					Tolerations: []corev1.Toleration{{Key: MasterLabel, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
						{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name: "coredns", Image: p.Images.CoreDNS, ImagePullPolicy: corev1.PullNever,
						Command: []string{"/coredns", "-conf", clusterDNSConfigDir + "/Corefile"},
						Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP}},
						VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: clusterDNSConfigDir, ReadOnly: true}},
						Resources:    requests("coredns", ""),
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/ready", Port: intstr.FromInt32(8181)}}, PeriodSeconds: 5},
						// NET_BIND_SERVICE: it listens on port 53 (see
						// NodeLocalDNS).
						SecurityContext: confined("NET_BIND_SERVICE"),
					}},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"}}}}},
				},
			},
		},
	}
	svc := &corev1.Service{
		TypeMeta: typeMeta("v1", "Service"), ObjectMeta: meta(ClusterDNSService),
		Spec: corev1.ServiceSpec{
			ClusterIP: p.Node.Cluster.ClusterDNS, Selector: labels,
			Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)}},
		},
	}
	return []runtime.Object{
		serviceAccount("coredns"),
		clusterRole("system:coredns", []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		}),
		clusterRoleBinding("system:coredns", "system:coredns", "coredns"),
		cm, dep, svc,
	}
}

// ReferencedImages lists every container image any manifest kiln renders
// uses, for every role: what the builder checks against the baked images.
func ReferencedImages(img Images) []string {
	refs, _ := nodeImages(img, func(corev1.PodSpec) bool { return true }, true)
	return refs
}

// NodeImages lists the container images a node of the role can run, in
// the order it imports them. A master's are all of them; a worker's are
// the node-local DNS, the DaemonSets not held to masters, the Deployments
// (which may land on any node) and the pause sandbox, less than half the
// archives. The first boot of them are what the kubelet needs for the
// node's static pods: the pause sandbox (no pod starts without it), then
// on a master etcd, the apiserver, the controller-manager and the
// scheduler, then the node-local DNS. The kubelet starts once those are
// in; the add-ons' images follow while the control plane comes up.
func NodeImages(img Images, role string) (refs []string, boot int) {
	if role != nodefile.RoleWorker {
		return nodeImages(img, func(corev1.PodSpec) bool { return true }, true)
	}
	onWorker := func(spec corev1.PodSpec) bool {
		_, mastersOnly := spec.NodeSelector[MasterLabel]
		return !mastersOnly
	}
	return nodeImages(img, onWorker, false)
}

// nodeImages collects the images of the pod specs runs keeps, the
// control plane's static pods only with controlPlane, in first-seen
// order after the pause sandbox; boot counts those of the static pods.
func nodeImages(img Images, runs func(corev1.PodSpec) bool, controlPlane bool) (out []string, boot int) {
	p := GenesisParams(sampleNode(), img)
	seen := map[string]bool{img.Pause: true}
	out = []string{img.Pause} // the sandbox of every pod, named in the containerd config
	add := func(spec corev1.PodSpec) {
		if !runs(spec) {
			return
		}
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			if !seen[c.Image] {
				seen[c.Image] = true
				out = append(out, c.Image)
			}
		}
	}
	pods := []*corev1.Pod{NodeLocalDNS(p)}
	if controlPlane {
		pods = append(ControlPlane(p), pods...)
	}
	for _, pod := range pods {
		add(pod.Spec)
	}
	boot = len(out)
	for _, o := range AddOns(p) {
		switch o := o.(type) {
		case *appsv1.DaemonSet:
			add(o.Spec.Template.Spec)
		case *appsv1.Deployment:
			add(o.Spec.Template.Spec)
		}
	}
	return out, boot
}
