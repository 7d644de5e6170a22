package manifests

import "fmt"

// ContainerdConfigPath is containerd's configuration in the node image.
const ContainerdConfigPath = "/etc/containerd/config.toml"

// ContainerdConfig is containerd 2's configuration (version 3): runc
// through the systemd cgroup driver like the kubelet, the baked pause
// image as every pod's sandbox (never pulled), CNI plugins from Debian's
// containernetworking-plugins.
func ContainerdConfig(pause string) string {
	return fmt.Sprintf(`# kiln: containerd 2 for the kubelet (namespace k8s.io) and Docker (moby)
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = %q

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = "/usr/sbin/runc"
  SystemdCgroup = true

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "/etc/cni/net.d"
`, pause)
}
