package gobuild

import "fmt"

// EtcdTarget is etcd's server at version (v3.5 and later), stamped
// nothing extra: etcd reports its module version itself.
func EtcdTarget(version string) Target {
	pkg := "go.etcd.io/etcd/server/v3"
	return Target{Name: "etcd", Module: pkg, Version: version, Packages: []string{pkg}, Names: map[string]string{pkg: "etcd"}}
}

// CoreDNSTarget is CoreDNS at version with its default plugins.
func CoreDNSTarget(version string) Target {
	return Target{
		Name: "coredns", Module: "github.com/coredns/coredns", Version: version,
		Packages: []string{"github.com/coredns/coredns"},
		LDFlags:  []string{fmt.Sprintf("-X github.com/coredns/coredns/coremain.GitCommit=%s", version)},
	}
}
