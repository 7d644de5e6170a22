package nodeconfig

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/kiln-project/kiln/contract/registries"
	"github.com/kiln-project/kiln/gen/site"
)

// registryFile is one file of a node's config.
type registryFile struct {
	path string
	data []byte
}

// registryFiles are what the site's mirrors put on every node
// (contract/registries): for containerd, a hosts.toml per upstream with
// the mirrors' CA bundles beside it and, when a mirror has a login, a
// drop-in for the CRI's registry configuration; for Docker, which
// mirrors Docker Hub alone, daemon.json's registry-mirrors and the
// mirrors' CAs under its certs.d. A site without registries adds
// nothing, and a node keeps what its image has.
func registryFiles(s *site.Site) []registryFile {
	var files []registryFile
	var dockerMirrors []string
	logins := map[string]*site.Credentials{}
	for i, r := range s.Cluster.Registries {
		dir := registries.HostDir(r.Upstream)
		files = append(files, registryFile{path.Join(dir, "hosts.toml"), hostsTOML(i, r)})
		for _, m := range r.Mirrors {
			if m.CA != nil {
				files = append(files, registryFile{path.Join(dir, registries.CAName(m.Host())), m.CA})
			}
			if m.Credentials != nil {
				logins[m.Host()] = m.Credentials
			}
			if r.Upstream != registries.DockerHub {
				continue
			}
			dockerMirrors = append(dockerMirrors, m.Endpoint())
			if m.CA != nil {
				files = append(files, registryFile{path.Join(registries.DockerCertsDir, m.Host(), "ca.crt"), m.CA})
			}
		}
	}
	if len(logins) > 0 {
		files = append(files, registryFile{registries.CredentialsFile, loginsTOML(logins)})
	}
	if len(dockerMirrors) > 0 {
		files = append(files, registryFile{registries.DockerDaemonConfig, dockerDaemonConfig(dockerMirrors)})
	}
	return files
}

// hostsTOML is containerd's hosts.toml for the site's registries[i]: its
// mirrors in the site's order, each trusted to resolve tags as well as to
// serve content, and the upstream itself last, as containerd tries it
// anyway when no mirror answers.
func hostsTOML(i int, r site.Registry) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# written by kiln gen from the site file (cluster.registries[%d]):\n", i)
	fmt.Fprintf(&b, "# %s's mirrors, tried in order before the upstream itself\n", r.Upstream)
	fmt.Fprintf(&b, "server = %s\n", tomlString(upstreamServer(r.Upstream)))
	for _, m := range r.Mirrors {
		fmt.Fprintf(&b, "\n[host.%s]\n", tomlString(m.Endpoint()))
		b.WriteString("  capabilities = [\"pull\", \"resolve\"]\n")
		if m.CA != nil {
			fmt.Fprintf(&b, "  ca = %s\n", tomlString(path.Join(registries.HostDir(r.Upstream), registries.CAName(m.Host()))))
		}
	}
	return []byte(b.String())
}

// upstreamServer is where containerd reaches an upstream itself: Docker
// Hub's images, named docker.io, are served by registry-1.docker.io.
func upstreamServer(upstream string) string {
	if upstream == registries.DockerHub {
		return "https://registry-1.docker.io"
	}
	return "https://" + upstream
}

// loginsTOML is the containerd drop-in with the mirrors' logins, by host:
// the CRI's registry configuration is where containerd 2.2 takes a
// registry's login from when the kubelet sends none (hosts.toml has no
// place for one). containerd marks it deprecated and, with it, pulls
// without its transfer service.
func loginsTOML(logins map[string]*site.Credentials) []byte {
	var b strings.Builder
	b.WriteString("# written by kiln gen from the site file: the registry mirrors' logins\n")
	b.WriteString("# (cluster.registries[].mirrors[].credentialsFile), used when a pull\n")
	b.WriteString("# carries no pull secret\nversion = 3\n")
	hosts := make([]string, 0, len(logins))
	for h := range logins {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	for _, h := range hosts {
		fmt.Fprintf(&b, "\n[plugins.\"io.containerd.cri.v1.images\".registry.configs.%s.auth]\n", tomlString(h))
		fmt.Fprintf(&b, "  username = %s\n  password = %s\n", tomlString(logins[h].Username), tomlString(logins[h].Password))
	}
	return []byte(b.String())
}

// dockerDaemonConfig is dockerd's daemon.json with Docker Hub's mirrors.
func dockerDaemonConfig(mirrors []string) []byte {
	data, err := json.MarshalIndent(struct {
		RegistryMirrors []string `json:"registry-mirrors"`
	}{mirrors}, "", "  ")
	if err != nil {
		panic(err) // a list of strings always marshals
	}
	return append(data, '\n')
}

// tomlString quotes s as a TOML basic string: quote, backslash and every
// control character escaped, everything else (valid UTF-8, as the site
// checks) as it is.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
