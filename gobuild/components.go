package gobuild

import "fmt"

// EtcdTarget is etcd's server at version (v3.5 and later), stamped
// nothing extra: etcd reports its module version itself.
func EtcdTarget(version string) Target {
	pkg := "go.etcd.io/etcd/server/v3"
	return Target{Name: "etcd", Module: pkg, Version: version, Packages: []string{pkg}, Names: map[string]string{pkg: "etcd"}, Cold: "~1 min"}
}

// CoreDNSTarget is CoreDNS at version with its default plugins.
func CoreDNSTarget(version string) Target {
	return Target{
		Name: "coredns", Module: "github.com/coredns/coredns", Version: version,
		Packages: []string{"github.com/coredns/coredns"}, Cold: "~4 min",
		LDFlags: []string{fmt.Sprintf("-X github.com/coredns/coredns/coremain.GitCommit=%s", version)},
	}
}

// ContainerdTarget is containerd 2.x (daemon, runc shim and ctr), static
// and without the cgo-only snapshotters. Kubernetes 1.36 and later need
// containerd 2; Debian bookworm ships 1.6.
func ContainerdTarget(version string) Target {
	mod := "github.com/containerd/containerd/v2"
	return Target{
		Name: "containerd", Module: mod, Version: version,
		Packages: []string{mod + "/cmd/containerd", mod + "/cmd/containerd-shim-runc-v2", mod + "/cmd/ctr"},
		Tags:     []string{"no_btrfs", "no_devmapper", "no_zfs"}, Cold: "~2 min",
		LDFlags: []string{
			fmt.Sprintf("-X %s/version.Version=%s", mod, version),
			fmt.Sprintf("-X %s/version.Revision=kiln", mod),
			fmt.Sprintf("-X %s/version.Package=%s", mod, "github.com/containerd/containerd"),
		},
	}
}
