package manifests

import (
	"fmt"

	"github.com/kiln-project/kiln/contract/registries"
)

// ContainerdConfigPath is containerd's configuration in the node image.
const ContainerdConfigPath = "/etc/containerd/config.toml"

// ContainerdConfig is containerd 2's configuration (version 3): runc
// through the systemd cgroup driver like the kubelet, the baked pause
// image as every pod's sandbox (never pulled), CNI plugins from Debian's
// containernetworking-plugins. Registry mirrors come from the node's
// config: the CRI image service's config_path is set, since its default,
// a list of two directories, is read as one path by the transfer service
// that pulls for the CRI, and every hosts.toml would be ignored; with no
// hosts.toml the setting changes nothing. The transfer service's own
// config_path is set alike: containerd 2.2 parses it but pulls for the
// CRI with the CRI's, and the two must not disagree once it is read. The
// drop-in directory carries what only the CRI's own registry
// configuration can hold, a mirror's login.
func ContainerdConfig(pause string) string {
	return fmt.Sprintf(`# kiln: containerd 2 for the kubelet (namespace k8s.io) and Docker (moby)
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
# the node's own settings, from kiln gen (a registry mirror's login)
imports = [%q]

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = %q

# <config_path>/<registry>/hosts.toml: the registry's mirrors, from kiln gen
[plugins."io.containerd.cri.v1.images".registry]
  config_path = %q

[plugins."io.containerd.transfer.v1.local"]
  config_path = %q

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
`, registries.Imports, pause, registries.HostsDir, registries.HostsDir)
}
