package manifests

import (
	"fmt"

	"sigs.k8s.io/yaml"
)

// File is one rendered file and where it goes on the node.
type File struct {
	Path    string
	Content []byte
}

// Files lists everything the manifests put on a node of the params' role:
// the kubelet configuration, the pods' resolv.conf, the node-local DNS
// (Corefile and static pod) on every node, and the control plane's static
// pods on masters.
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
	pods := append(ControlPlaneIf(p), NodeLocalDNS(p))
	for _, pod := range pods {
		data, err := yaml.Marshal(pod)
		if err != nil {
			return nil, fmt.Errorf("static pod %s: %w", pod.Name, err)
		}
		files = append(files, File{StaticPodDir + "/" + pod.Name + ".yaml", data})
	}
	return files, nil
}
