// Package registries is where a node's container runtimes read their
// registry configuration: containerd's hosts directory (a hosts.toml per
// upstream registry, beside the CA bundles it names), containerd's
// drop-in directory, and Docker's daemon.json and certificate directory.
// The image's containerd configuration points at the containerd paths
// (manifests); kiln gen writes into all of them from the site's
// cluster.registries (gen/nodeconfig).
package registries

import "strings"

const (
	// HostsDir is containerd's config_path, for the CRI image service
	// and the transfer service alike: <HostsDir>/<upstream>/hosts.toml
	// names the upstream's mirrors. One directory, not containerd's
	// default list of two, which the transfer service takes for a
	// single path (and then finds no hosts.toml at all).
	HostsDir = "/etc/containerd/certs.d"
	// DropInDir holds containerd configuration files that the image's
	// config.toml imports (Imports): the settings of one node that
	// kiln gen writes, such as a mirror's login (CredentialsFile).
	DropInDir = "/etc/containerd/conf.d"
	// Imports is the pattern in config.toml's imports.
	Imports = DropInDir + "/*.toml"
	// CredentialsFile holds the mirrors' logins as CRI registry
	// configuration; root only.
	CredentialsFile = DropInDir + "/50-kiln-registry-auth.toml"

	// DockerDaemonConfig is dockerd's configuration file.
	DockerDaemonConfig = "/etc/docker/daemon.json"
	// DockerCertsDir holds, per registry host:port, the CA dockerd
	// trusts for it (<DockerCertsDir>/<host:port>/ca.crt).
	DockerCertsDir = "/etc/docker/certs.d"

	// DockerHub is the name containerd and Docker give Docker Hub's
	// images (docker.io/library/busybox), the one upstream Docker
	// mirrors.
	DockerHub = "docker.io"
)

// HostDir is the directory of upstream's hosts.toml.
func HostDir(upstream string) string { return HostsDir + "/" + upstream }

// CAName is the file name, inside its upstream's HostDir, of the CA
// bundle that a mirror at host (host[:port]) is checked with.
func CAName(host string) string { return strings.ReplaceAll(host, ":", "_") + ".crt" }
