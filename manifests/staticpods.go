package manifests

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kiln-project/kiln/contract/discovery"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/rtexec"
)

// arg is one command-line flag of a component; a list keeps the order
// stable and reviewable.
type arg struct{ name, value string }

func command(binary string, flags []arg) []string {
	out := []string{binary}
	for _, f := range flags {
		out = append(out, "--"+f.name+"="+f.value)
	}
	return out
}

// ControlPlane returns the static pods of a master: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler.
func ControlPlane(p Params) []*corev1.Pod {
	return []*corev1.Pod{Etcd(p), APIServer(p), ControllerManager(p), Scheduler(p)}
}

// ControlPlaneIf is ControlPlane for a master and nothing for a worker.
func ControlPlaneIf(p Params) []*corev1.Pod {
	if p.Node.Role == nodefile.RoleWorker {
		return nil
	}
	return ControlPlane(p)
}

// Etcd is the node's etcd member; its settings (TLS for clients and
// peers, data on the state partition, the membership) are in the
// configuration file EtcdConfig renders, so this pod changes only with
// the timing profile. Under a profile with EtcdRealtime, etcd starts
// through the node's rt-exec (mounted from the image) with CAP_SYS_NICE,
// the capability the real-time policy needs.
func Etcd(p Params) *corev1.Pod {
	t := timing(p)
	pod := staticPod("etcd", p.Images.Etcd, []string{"etcd", "--config-file=" + EtcdConfigPath}, httpProbe("/health?serializable=true", 2381, corev1.URISchemeHTTP))
	startupProbe(pod, t)
	if t.EtcdRealtime {
		c := &pod.Spec.Containers[0]
		c.Command = rtexec.Command(c.Command...)
		// SYS_NICE: rt-exec sets the real-time round-robin policy,
		// which etcd then inherits.
		c.SecurityContext = confined("SYS_NICE")
		// rt-exec, the program etcd starts through.
		mount(pod, "rt-exec", rtexec.Path, true, corev1.HostPathFile)
	}
	// etcd's data: the one directory it writes (its snapshots' and
	// defragmentation's temporary files included).
	mount(pod, "etcd-data", EtcdDataDir, false, corev1.HostPathDirectoryOrCreate)
	// etcd's configuration file, as a directory: the anchor replaces the
	// file by renaming a new one over it, which a mount of the file
	// itself would not show.
	mount(pod, "etcd-config", EtcdConfigDir, true, corev1.HostPathDirectory)
	// Its serving and peer pairs and the etcd CA, one file each.
	client, peer := etcdTransport()
	mountFiles(pod, client.files(), peer.files())
	return pod
}

// APIServer is the node's kube-apiserver; it talks to the local etcd
// member only, so a master needs no load balancer in front of etcd.
func APIServer(p Params) *corev1.Pod {
	c, t := p.Node.Cluster, timing(p)
	port := strconv.Itoa(c.APIServerPort)
	flags := []arg{
		{"advertise-address", p.Node.Address},
		{"secure-port", port},
		{"allow-privileged", "true"},
		{"authorization-mode", "Node,RBAC"},
		{"enable-admission-plugins", "NodeRestriction"},
		{"client-ca-file", pki("ca.crt")},
		{"tls-cert-file", pki("apiserver.crt")},
		{"tls-private-key-file", pki("apiserver.key")},
		{"etcd-servers", "https://127.0.0.1:2379"},
		{"etcd-cafile", pki("etcd/ca.crt")},
		{"etcd-certfile", pki("apiserver-etcd-client.crt")},
		{"etcd-keyfile", pki("apiserver-etcd-client.key")},
		{"etcd-healthcheck-timeout", seconds(t.EtcdCheck)},
		{"etcd-readycheck-timeout", seconds(t.EtcdCheck)},
		{"kubelet-client-certificate", pki("apiserver-kubelet-client.crt")},
		{"kubelet-client-key", pki("apiserver-kubelet-client.key")},
		{"kubelet-preferred-address-types", "InternalIP,Hostname"},
		{"service-cluster-ip-range", c.ServiceCIDR},
		{"service-account-issuer", "https://kubernetes.default.svc." + c.Domain},
		{"service-account-key-file", pki("sa.pub")},
		{"service-account-signing-key-file", pki("sa.key")},
		{"proxy-client-cert-file", pki("front-proxy-client.crt")},
		{"proxy-client-key-file", pki("front-proxy-client.key")},
		{"requestheader-client-ca-file", pki("front-proxy-ca.crt")},
		{"requestheader-allowed-names", "front-proxy-client"},
		{"requestheader-extra-headers-prefix", "X-Remote-Extra-"},
		{"requestheader-group-headers", "X-Remote-Group"},
		{"requestheader-username-headers", "X-Remote-User"},
	}
	flags = append(flags, apiServerHardening(p)...)
	pod := staticPod("kube-apiserver", p.Images.APIServer, command("kube-apiserver", flags), httpProbe("/livez", c.APIServerPort, corev1.URISchemeHTTPS))
	startupProbe(pod, t)
	if c.APIServerPort < 1024 {
		// NET_BIND_SERVICE: the site's apiServerPort is below 1024.
		pod.Spec.Containers[0].SecurityContext = confined("NET_BIND_SERVICE")
	}
	// The files its flags name (its pairs, the keys it checks and signs
	// with, its configuration files), read-only, one file each.
	mountFiles(pod, namedFiles(flags))
	// The audit log, which it writes and rotates.
	mount(pod, "audit-log", AuditLogDir, false, corev1.HostPathDirectoryOrCreate)
	return pod
}

// ControllerManager signs kubelet certificate requests with the cluster
// CA and allocates pod CIDRs; it reaches the apiservers through the
// discovery name like everything else.
func ControllerManager(p Params) *corev1.Pod {
	c, t := p.Node.Cluster, timing(p)
	kc := kubeconfig("controller-manager")
	flags := []arg{
		{"kubeconfig", kc},
		{"authentication-kubeconfig", kc},
		{"authorization-kubeconfig", kc},
		{"bind-address", "127.0.0.1"},
		{"leader-elect", "true"},
		{"leader-elect-lease-duration", seconds(t.LeaseDuration)},
		{"leader-elect-renew-deadline", seconds(t.RenewDeadline)},
		{"leader-elect-retry-period", seconds(t.RetryPeriod)},
		{"cluster-name", c.Name},
		{"client-ca-file", pki("ca.crt")},
		{"requestheader-client-ca-file", pki("front-proxy-ca.crt")},
		{"root-ca-file", pki("ca.crt")},
		{"cluster-signing-cert-file", pki("ca.crt")},
		{"cluster-signing-key-file", pki("ca.key")},
		{"service-account-private-key-file", pki("sa.key")},
		{"use-service-account-credentials", "true"},
		{"controllers", "*,bootstrapsigner,tokencleaner"},
		{"node-monitor-grace-period", seconds(t.NodeGrace)},
		{"allocate-node-cidrs", "true"},
		{"cluster-cidr", c.PodCIDR},
		{"service-cluster-ip-range", c.ServiceCIDR},
	}
	flags = append(flags, componentHardening()...)
	pod := staticPod("kube-controller-manager", p.Images.ControllerManager, command("kube-controller-manager", flags), httpProbe("/healthz", 10257, corev1.URISchemeHTTPS))
	startupProbe(pod, t)
	// Its kubeconfig, the CA pair it signs kubelet certificates with,
	// sa.key, the CAs it checks clients against: read-only, one file each.
	mountFiles(pod, namedFiles(flags))
	// The FlexVolume prober creates and watches its plugin directory at
	// start, and on a read-only root filesystem logs an error instead.
	// kiln installs no FlexVolume driver: an empty directory will do.
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "flexvolume-dir",
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	c0 := &pod.Spec.Containers[0]
	c0.VolumeMounts = append(c0.VolumeMounts, corev1.VolumeMount{Name: "flexvolume-dir", MountPath: FlexVolumePluginDir})
	return pod
}

// FlexVolumePluginDir is the controller-manager's default
// --flex-volume-plugin-dir.
const FlexVolumePluginDir = "/usr/libexec/kubernetes/kubelet-plugins/volume/exec"

// Scheduler is the node's kube-scheduler.
func Scheduler(p Params) *corev1.Pod {
	kc, t := kubeconfig("scheduler"), timing(p)
	flags := []arg{
		{"kubeconfig", kc},
		{"authentication-kubeconfig", kc},
		{"authorization-kubeconfig", kc},
		{"bind-address", "127.0.0.1"},
		{"leader-elect", "true"},
		{"leader-elect-lease-duration", seconds(t.LeaseDuration)},
		{"leader-elect-renew-deadline", seconds(t.RenewDeadline)},
		{"leader-elect-retry-period", seconds(t.RetryPeriod)},
	}
	flags = append(flags, componentHardening()...)
	pod := staticPod("kube-scheduler", p.Images.Scheduler, command("kube-scheduler", flags), httpProbe("/livez", 10259, corev1.URISchemeHTTPS))
	startupProbe(pod, t)
	// Its kubeconfig, read-only.
	mountFiles(pod, namedFiles(flags))
	return pod
}

// staticPod is a host-network, node-critical pod in kube-system with one
// container, confined (podsecurity.go) with no capability: etcd, the
// apiserver, the controller-manager and the scheduler listen on ports
// above 1024 and write only to their mounts.
func staticPod(name, image string, cmd []string, liveness *corev1.Probe) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "kube-system",
			Labels: map[string]string{"component": name, "tier": "control-plane", "app.kubernetes.io/managed-by": "kiln"},
		},
		Spec: corev1.PodSpec{
			HostNetwork:       true,
			PriorityClassName: "system-node-critical",
			// The components reach the apiservers through the discovery
			// name, which only the node-local CoreDNS answers.
			DNSPolicy:       corev1.DNSNone,
			DNSConfig:       &corev1.PodDNSConfig{Nameservers: []string{discovery.NodeLocalAddress}},
			SecurityContext: podSecurity(),
			Containers: []corev1.Container{{
				Name: name, Image: image, ImagePullPolicy: corev1.PullNever, Command: cmd,
				Resources:       requests(name, "64Mi"),
				LivenessProbe:   liveness,
				SecurityContext: confined(),
			}},
		},
	}
}

// httpProbe is a liveness probe: eight failures in a row, 80 s at the
// least, restart the container. It has no initial delay because it only
// runs once the startup probe has succeeded.
func httpProbe(path string, port int, scheme corev1.URIScheme) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Host: "127.0.0.1", Path: path, Port: intstr.FromInt32(int32(port)), Scheme: scheme,
		}},
		PeriodSeconds: int32(probePeriod.Seconds()), TimeoutSeconds: 15, FailureThreshold: 8,
	}
}

// startupProbe gives the pod's container a startup probe on the same
// endpoint as its liveness probe, allowing the profile's startup time:
// a slow start is waited for instead of killed by the liveness probe and
// begun again; the liveness probe then allows the profile's liveness
// time. A container without a liveness probe gets none.
func startupProbe(pod *corev1.Pod, t Timing) {
	c := &pod.Spec.Containers[0]
	if c.LivenessProbe == nil {
		return
	}
	c.LivenessProbe.FailureThreshold = t.livenessFailures()
	c.StartupProbe = &corev1.Probe{
		ProbeHandler:  *c.LivenessProbe.ProbeHandler.DeepCopy(),
		PeriodSeconds: int32(probePeriod.Seconds()), TimeoutSeconds: c.LivenessProbe.TimeoutSeconds,
		FailureThreshold: t.startupFailures(),
	}
}

// namedFiles are the files under /etc/kiln that flags name.
func namedFiles(flags []arg) []string {
	var out []string
	for _, f := range flags {
		if strings.HasPrefix(f.value, nodefile.Dir+"/") {
			out = append(out, f.value)
		}
	}
	return out
}

// mountFiles mounts each file read-only at its own path, one volume
// each, a file named twice mounted once: a component sees the files it
// names, never the rest of their directory (the CA key, the
// service-account key, the admin credential).
func mountFiles(pod *corev1.Pod, lists ...[]string) {
	seen := map[string]bool{}
	for _, files := range lists {
		for _, f := range files {
			if !seen[f] {
				seen[f] = true
				mount(pod, fileVolume(f), f, true, corev1.HostPathFile)
			}
		}
	}
}

// fileVolume is the volume name of a file under /etc/kiln: its path
// there, e.g. pki-etcd-ca-crt.
func fileVolume(path string) string {
	rel := strings.TrimPrefix(path, nodefile.Dir+"/")
	return strings.NewReplacer("/", "-", ".", "-", "_", "-").Replace(rel)
}

// mount adds a hostPath volume mounted at the same path in the container.
func mount(pod *corev1.Pod, name, path string, readOnly bool, kind corev1.HostPathType) {
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
		Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &kind}},
	})
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: path, ReadOnly: readOnly})
}
