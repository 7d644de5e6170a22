package nodeconfig

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pelletier/go-toml"

	"github.com/kiln-project/kiln/contract/registries"
	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/golden"
)

// registriesYAML are the mirrors of the golden site: Docker Hub through
// the lab's registry (a CA, a login) and a plain-http cache, quay.io
// through the same registry and login, a private registry through an
// address.
const registriesYAML = `  registries:
    - upstream: docker.io
      mirrors:
        - {url: "https://registry.lab:5000/", caFile: ca.pem, credentialsFile: login.yaml}
        - {url: "http://cache.lab", insecure: true}
    - upstream: quay.io
      mirrors:
        - {url: "https://registry.lab:5000", caFile: ca.pem, credentialsFile: login.yaml}
    - upstream: registry.example:5000
      mirrors: [{url: "https://10.0.0.9"}]
`

// registriesSite is the example site with registriesYAML, its files read
// from testdata/registries.
func registriesSite(t *testing.T) *site.Site {
	t.Helper()
	data, err := os.ReadFile("../../examples/site.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(data), "\nnodes:\n", "\n"+registriesYAML+"nodes:\n", 1)
	s, err := site.Parse("testdata/registries/site.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Cluster.Registries) != 3 {
		t.Fatalf("the site has %d registries", len(s.Cluster.Registries))
	}
	return s
}

// isRegistryFile reports whether a node path is container runtime
// configuration that only a site's registries put there.
func isRegistryFile(p string) bool {
	return strings.HasPrefix(p, "/etc/containerd/") || strings.HasPrefix(p, "/etc/docker/")
}

// registryFilesOf are the registry files of a rendered config, in its
// order, for review.
func registryFilesOf(t *testing.T, data []byte) []golden.File {
	t.Helper()
	var out []golden.File
	for _, f := range decode(t, data).Storage.Files {
		if isRegistryFile(f.Path) {
			out = append(out, golden.File{Path: f.Path, Mode: os.FileMode(*f.Mode), Content: contents(t, f)})
		}
	}
	return out
}

// Every node, master or worker, receives the same registry files; the
// golden file shows them with their modes.
func TestGoldenRegistries(t *testing.T) {
	s := registriesSite(t)
	st := pki.Store{Dir: testPKI, Now: testPKIClock}
	var first []byte
	for _, n := range s.Nodes {
		data, err := Render(s, st, n)
		if err != nil {
			t.Fatal(err)
		}
		got := golden.Files(registryFilesOf(t, data))
		if first == nil {
			first = got
			golden.Check(t, filepath.Join("testdata", "golden", "registries.golden"), got)
		} else if !bytes.Equal(got, first) {
			t.Errorf("%s's registry files differ from %s's: %s", n.Name, s.Nodes[0].Name, golden.FirstDifference(got, first))
		}
	}
}

// A site without registries puts nothing under /etc/containerd or
// /etc/docker: the image's own configuration stands.
func TestNoRegistriesNoFiles(t *testing.T) {
	s := exampleSite(t)
	st := pki.Store{Dir: testPKI, Now: testPKIClock}
	for _, n := range s.Nodes {
		data, err := Render(s, st, n)
		if err != nil {
			t.Fatal(err)
		}
		if files := registryFilesOf(t, data); len(files) > 0 {
			t.Errorf("%s receives %s without registries in the site", n.Name, files[0].Path)
		}
	}
}

// The TOML files read back, through a TOML parser, as what containerd
// is to take from them: the login byte for byte, quotes and backslashes
// included, and each CA where its hosts.toml says.
func TestRegistryTOMLReadsBack(t *testing.T) {
	s := registriesSite(t)
	login := s.Cluster.Registries[0].Mirrors[0].Credentials
	if !strings.ContainsAny(login.Password, `"\`) {
		t.Fatalf("the test login's password %q has nothing TOML must escape", login.Password)
	}
	files := map[string][]byte{}
	for _, f := range registryFiles(s) {
		files[f.path] = f.data
	}
	auth, err := toml.LoadBytes(files[registries.CredentialsFile])
	if err != nil {
		t.Fatalf("%s: %v", registries.CredentialsFile, err)
	}
	if v := auth.Get("version"); v != int64(3) {
		t.Errorf("%s: version %v, want 3", registries.CredentialsFile, v)
	}
	configs := []string{"plugins", "io.containerd.cri.v1.images", "registry", "configs"}
	hosts, _ := auth.GetPath(configs).(*toml.Tree)
	if hosts == nil || len(hosts.Keys()) != 1 {
		t.Fatalf("%s: logins for %v, want registry.lab:5000 alone", registries.CredentialsFile, hosts)
	}
	at := append(configs, "registry.lab:5000", "auth")
	if u, p := auth.GetPath(append(at, "username")), auth.GetPath(append(at, "password")); u != login.Username || p != login.Password {
		t.Errorf("%s: the login reads back as %q, %q", registries.CredentialsFile, u, p)
	}

	for upstream, want := range map[string]struct {
		server  string
		mirrors map[string]string // endpoint: its ca ("" for none)
	}{
		"docker.io": {"https://registry-1.docker.io", map[string]string{
			"https://registry.lab:5000": "/etc/containerd/certs.d/docker.io/registry.lab_5000.crt", "http://cache.lab": ""}},
		"quay.io": {"https://quay.io", map[string]string{
			"https://registry.lab:5000": "/etc/containerd/certs.d/quay.io/registry.lab_5000.crt"}},
		"registry.example:5000": {"https://registry.example:5000", map[string]string{"https://10.0.0.9": ""}},
	} {
		path := registries.HostDir(upstream) + "/hosts.toml"
		tree, err := toml.LoadBytes(files[path])
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if got := tree.Get("server"); got != want.server {
			t.Errorf("%s: server %v, want %s", path, got, want.server)
		}
		host, _ := tree.Get("host").(*toml.Tree)
		if host == nil || len(host.Keys()) != len(want.mirrors) {
			t.Fatalf("%s: hosts %v, want %v", path, host, want.mirrors)
		}
		for endpoint, ca := range want.mirrors {
			caps := host.GetPath([]string{endpoint, "capabilities"})
			if caps == nil || len(caps.([]any)) != 2 {
				t.Errorf("%s: %s capabilities %v, want pull and resolve", path, endpoint, caps)
			}
			got, _ := host.GetPath([]string{endpoint, "ca"}).(string)
			if got != ca {
				t.Errorf("%s: %s ca %q, want %q", path, endpoint, got, ca)
			}
			if ca != "" && !bytes.Equal(files[ca], s.Cluster.Registries[0].Mirrors[0].CA) {
				t.Errorf("%s: %s is not the site's CA bundle", path, ca)
			}
		}
	}
}

// tomlString escapes what a TOML basic string cannot hold as it is.
func TestTOMLString(t *testing.T) {
	for _, v := range []string{"plain", `a"b`, `a\b`, "tab\there", "nul\x00", "del\x7f", "wörd ✓", `\u0041`} {
		tree, err := toml.Load("k = " + tomlString(v))
		if err != nil {
			t.Errorf("%q quoted as %s: %v", v, tomlString(v), err)
			continue
		}
		if got := tree.Get("k"); got != v {
			t.Errorf("%q quoted as %s reads back as %q", v, tomlString(v), got)
		}
	}
}
