package manifests

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kiln-project/kiln/contract/nodefile"
)

// File is one rendered file and where it goes on the node.
type File struct {
	Path    string
	Content []byte
}

// Files lists everything the manifests put on a node of the params' role:
// the kubelet configuration, the pods' resolv.conf, the node-local DNS
// (Corefile and static pod) on every node, and the control plane's static
// pods (with etcd's configuration file) and the apiserver's audit policy
// and authentication configuration on masters.
func Files(p Params) ([]File, error) {
	kc, err := yaml.Marshal(KubeletConfig(p))
	if err != nil {
		return nil, fmt.Errorf("kubelet config: %w", err)
	}
	files := []File{
		{"/etc/kiln/kubelet.yaml", kc},
		{PodResolvConf, []byte(PodResolvConfContent(p))},
		{CorefilePath, []byte(Corefile(p))},
	}
	files = append(files, apiServerConfigFiles(p)...)
	for _, pod := range ControlPlaneIf(p) {
		fs, err := podFiles(p, pod)
		if err != nil {
			return nil, err
		}
		files = append(files, fs...)
	}
	dns, err := staticPodFile(NodeLocalDNS(p))
	if err != nil {
		return nil, err
	}
	return append(files, dns), nil
}

// apiServerConfigFiles are a master's apiserver configuration files
// that the role renders: the audit policy and the authentication
// configuration.
func apiServerConfigFiles(p Params) []File {
	if p.Node.Role == nodefile.RoleWorker {
		return nil
	}
	return []File{{AuditPolicyPath, []byte(AuditPolicy)}, {AuthnConfigPath, []byte(AuthnConfig())}}
}

// ComponentFiles are what keeps one control-plane component running: its
// static pod and, for etcd, its configuration file. The role writes them
// on every boot and the component's anchor keeps them.
func ComponentFiles(p Params, component string) ([]File, error) {
	for _, pod := range ControlPlane(p) {
		if pod.Name == component {
			return podFiles(p, pod)
		}
	}
	return nil, fmt.Errorf("no control-plane component %q (the components: %v)", component, AnchoredComponents)
}

// podFiles are a control-plane pod's static pod file and, for etcd, its
// configuration file.
func podFiles(p Params, pod *corev1.Pod) ([]File, error) {
	f, err := staticPodFile(pod)
	if err != nil || pod.Name != "etcd" {
		return []File{f}, err
	}
	conf, err := EtcdConfig(p)
	return []File{{EtcdConfigPath, conf}, f}, err
}

func staticPodFile(pod *corev1.Pod) (File, error) {
	data, err := yaml.Marshal(pod)
	if err != nil {
		return File{}, fmt.Errorf("static pod %s: %w", pod.Name, err)
	}
	return File{StaticPodDir + "/" + pod.Name + ".yaml", data}, nil
}
