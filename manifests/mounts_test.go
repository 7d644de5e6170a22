package manifests

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kiln-project/kiln/contract/layout"
)

// hostPaths are the host paths a pod spec mounts.
func hostPaths(spec corev1.PodSpec) []string {
	var out []string
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			out = append(out, v.HostPath.Path)
		}
	}
	return out
}

// exposes reports whether mounting host path m shows file f.
func exposes(m, f string) bool {
	return m == f || m == "/" || strings.HasPrefix(f, strings.TrimSuffix(m, "/")+"/")
}

// secretFiles are the node's secrets and the pods that may see each.
var secretFiles = []struct {
	path    string
	allowed []string
}{
	{PKIDir + "/ca.key", []string{"kube-controller-manager"}},
	{EncryptionConfigPath, []string{"kube-apiserver"}},
	{PKIDir + "/sa.key", []string{"kube-apiserver", "kube-controller-manager"}},
	{PKIDir + "/apiserver.key", []string{"kube-apiserver"}},
	{PKIDir + "/apiserver-etcd-client.key", []string{"kube-apiserver"}},
	{PKIDir + "/etcd-server.key", []string{"etcd"}},
	{PKIDir + "/etcd-peer.key", []string{"etcd"}},
	{PKIDir + "/kubelet-server.key", nil},
	{PKIDir + "/kubelet-client.key", nil},
	{KubeconfigDir + "/admin.conf", nil},
	{KubeconfigDir + "/agent.conf", nil},
	{KubeconfigDir + "/kubelet.conf", nil},
	{KubeconfigDir + "/controller-manager.conf", []string{"kube-controller-manager"}},
	{KubeconfigDir + "/scheduler.conf", []string{"kube-scheduler"}},
	{layout.StateConfigPath, nil},
	{layout.EmbeddedConfigPath, nil},
	{"/var/lib/kiln/backup/etcd", nil},
	{EtcdDataDir + "/member", []string{"etcd"}},
}

// mountingPods are every pod kiln renders for a genesis node, static or
// in a DaemonSet, by name.
func mountingPods(t *testing.T) map[string]corev1.PodSpec {
	t.Helper()
	p := GenesisParams(node("m1", "genesis", "192.168.10.11"), testImages)
	out := map[string]corev1.PodSpec{}
	for _, pod := range append(ControlPlane(p), NodeLocalDNS(p)) {
		out[pod.Name] = pod.Spec
	}
	for _, o := range AddOns(p) {
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			out[ds.Name] = ds.Spec.Template.Spec
		}
	}
	return out
}

// A pod sees a secret only when its component uses it: no anchor sees
// the CA key, the service-account key or the admin credential.
func TestPodsMountOnlyTheSecretsTheyUse(t *testing.T) {
	pods := mountingPods(t)
	for _, s := range secretFiles {
		t.Run(s.path, func(t *testing.T) {
			for name, spec := range pods {
				for _, m := range hostPaths(spec) {
					if exposes(m, s.path) && !slices.Contains(s.allowed, name) {
						t.Errorf("%s mounts %s, which shows %s", name, m, s.path)
					}
				}
			}
		})
	}
}

// What each pod mounts under /etc/kiln, exactly: etcd only its own
// certificates; the discovery anchor, on every node, only the node file.
func TestPodsMountTheirFilesOnly(t *testing.T) {
	pods := mountingPods(t)
	for _, tc := range []struct {
		pod  string
		want []string
	}{
		{"etcd", []string{PKIDir + "/etcd-server.crt", PKIDir + "/etcd-server.key", PKIDir + "/etcd/ca.crt", PKIDir + "/etcd-peer.crt", PKIDir + "/etcd-peer.key"}},
		{"kube-scheduler", []string{KubeconfigDir + "/scheduler.conf"}},
		{"kiln-anchor-discovery", []string{"/etc/kiln/node.json"}},
		{"kiln-anchor-control-plane", []string{"/etc/kiln/node.json"}},
		{"kiln-net", nil},
	} {
		t.Run(tc.pod, func(t *testing.T) {
			spec, ok := pods[tc.pod]
			if !ok {
				t.Fatalf("no pod %s", tc.pod)
			}
			var got []string
			for _, m := range hostPaths(spec) {
				if exposes("/etc/kiln", m) || exposes(m, "/etc/kiln") {
					got = append(got, m)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("mounts under /etc/kiln: %v, want %v", got, tc.want)
			}
		})
	}
}

// The discovery anchor writes the zone and nothing else of the state
// partition.
func TestDiscoveryAnchorMountsNoState(t *testing.T) {
	spec := mountingPods(t)["kiln-anchor-discovery"]
	for _, m := range hostPaths(spec) {
		if exposes(m, "/var/lib/kiln/manifests") || exposes(m, "/var/lib/kiln/stamps") {
			t.Errorf("the discovery anchor mounts %s", m)
		}
	}
}

// Every host file a static pod mounts is read-only; a static pod writes
// only its data or log directory on the host.
func TestStaticPodFileMountsAreReadOnly(t *testing.T) {
	p := GenesisParams(node("m1", "genesis", "192.168.10.11"), testImages)
	writable := map[string][]string{"etcd": {EtcdDataDir}, "kube-apiserver": {AuditLogDir}}
	for _, pod := range ControlPlane(p) {
		host := map[string]bool{}
		for _, v := range pod.Spec.Volumes {
			host[v.Name] = v.HostPath != nil
		}
		for _, vm := range pod.Spec.Containers[0].VolumeMounts {
			if host[vm.Name] && !vm.ReadOnly && !slices.Contains(writable[pod.Name], vm.MountPath) {
				t.Errorf("%s mounts %s writable", pod.Name, vm.MountPath)
			}
		}
	}
}
