package site

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/internal/certtest"
	"github.com/kiln-project/kiln/internal/validation"
)

// registriesSite is a one-node site whose cluster section ends with
// registries (YAML lines indented under cluster).
func registriesSite(registries string) []byte {
	return []byte(`apiVersion: kiln.dev/v1alpha1
kind: Site
cluster:
  name: c
  kubernetesVersion: v1.37.1
  podCIDR: 10.244.0.0/16
  serviceCIDR: 10.96.0.0/12
` + registries + `nodes:
  - {name: n1, role: genesis, macs: ["52:54:00:00:00:01"], installDisk: /dev/vda, network: {address: 10.0.0.2/24}}
`)
}

// The files a mirror names are read relative to the site file, and an
// http mirror is taken when it says insecure: true.
func TestRegistriesLoad(t *testing.T) {
	s, err := Parse("testdata/registries/site.yaml", registriesSite(`  registries:
    - upstream: docker.io
      mirrors:
        - {url: "https://registry.lab:5000/", caFile: ca.pem, credentialsFile: login.yaml}
        - {url: "http://cache.lab", insecure: true}
    - upstream: registry.example:5000
      mirrors: [{url: "https://10.0.0.9"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile("testdata/registries/ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	r := s.Cluster.Registries
	if len(r) != 2 || len(r[0].Mirrors) != 2 || len(r[1].Mirrors) != 1 {
		t.Fatalf("registries %+v", r)
	}
	lab, cache := r[0].Mirrors[0], r[0].Mirrors[1]
	if !bytes.Equal(lab.CA, ca) {
		t.Errorf("the CA bundle read is not ca.pem")
	}
	if lab.Credentials == nil || *lab.Credentials != (Credentials{"kiln-pull", "not-a-secret: test only"}) {
		t.Errorf("credentials %#v", lab.Credentials)
	}
	for _, tc := range []struct{ got, want string }{
		{lab.Endpoint(), "https://registry.lab:5000"},
		{lab.Host(), "registry.lab:5000"},
		{cache.Endpoint(), "http://cache.lab"},
		{cache.Host(), "cache.lab"},
		{r[1].Mirrors[0].Host(), "10.0.0.9"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	if cache.CA != nil || cache.Credentials != nil || r[1].Mirrors[0].CA != nil {
		t.Errorf("a mirror without files has some: %+v", r)
	}
}

// What a mirror's CA bundle and login file must hold, each problem at the
// field that names the file; no message quotes a login file.
func TestRegistryFiles(t *testing.T) {
	serving, err := certtest.NewServing("registry.lab")
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	const secret = "hunter2-SECRET"
	for _, tc := range []struct {
		name        string
		ca, login   string // file contents; "" leaves the field out
		wantPath    string // "" for no problem
		wantMessage string
	}{
		{"a CA and a login", string(serving.CAPEM), "username: kiln\npassword: " + secret + "\n", "", ""},
		{"a bundle of two with text around", "CA of the lab\n" + string(serving.CAPEM) + string(serving.CAPEM) + "end\n", "", "", ""},
		{"not PEM", "hello\n", "", "caFile", "holds no PEM certificate"},
		{"empty CA file", "\n", "", "caFile", "holds no PEM certificate"},
		{"a key in the bundle", string(serving.CAPEM) + string(keyPEM), "", "caFile", "PEM block 2 is a EC PRIVATE KEY, not a CERTIFICATE"},
		{"a certificate that does not parse", "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n", "", "caFile", "certificate 1 does not parse"},
		{"no password", "", "username: kiln\n", "credentialsFile", "password is missing or empty"},
		{"no username", "", "password: " + secret + "\n", "credentialsFile", "username is missing or empty"},
		{"an unknown key", "", "username: kiln\npassword: " + secret + "\nemail: a@b\n", "credentialsFile", `unknown key "email"`},
		{"a password that is a number", "", "username: kiln\npassword: 12345\n", "credentialsFile", "password is not a string (quote it)"},
		{"a colon in the username", "", "username: \"a:b\"\npassword: " + secret + "\n", "credentialsFile", "holds a colon"},
		{"a control character", "", "username: kiln\npassword: \"" + secret + "\\n\"\n", "credentialsFile", "the password holds a control character"},
		{"not YAML", "", "username: kiln\npassword: [" + secret + "\n", "credentialsFile", "is not YAML with username and password (its contents are not shown"},
		{"a list", "", "- " + secret + "\n", "credentialsFile", "is not YAML with username and password"},
		{"a login line", "", "kiln:" + secret + "\n", "credentialsFile", "is not YAML with username and password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fields := ""
			if tc.ca != "" {
				writeFile(t, filepath.Join(dir, "ca.pem"), tc.ca)
				fields += ", caFile: ca.pem"
			}
			if tc.login != "" {
				writeFile(t, filepath.Join(dir, "login.yaml"), tc.login)
				fields += ", credentialsFile: login.yaml"
			}
			s, err := Parse(filepath.Join(dir, "site.yaml"), registriesSite(`  registries:
    - upstream: docker.io
      mirrors: [{url: "https://registry.lab"`+fields+`}]
`))
			if tc.wantPath == "" {
				if err != nil {
					t.Fatal(err)
				}
				m := s.Cluster.Registries[0].Mirrors[0]
				if string(m.CA) != tc.ca || tc.login != "" && m.Credentials.Password != secret {
					t.Errorf("read %q, %#v", m.CA, m.Credentials)
				}
				return
			}
			var l *validation.List
			if !errors.As(err, &l) {
				t.Fatalf("got %v, want a validation list", err)
			}
			path := "cluster.registries[0].mirrors[0]." + tc.wantPath
			if len(l.Errors) != 1 || l.Errors[0].Path != path || !strings.Contains(l.Errors[0].Reason, tc.wantMessage) {
				t.Errorf("got %v\nwant one problem at %s: ...%s...", err, path, tc.wantMessage)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the message quotes the login: %v", err)
			}
		})
	}
}

// A site or a mirror printed, the way a log line or an error message
// would, does not show the login.
func TestCredentialsDoNotPrint(t *testing.T) {
	s, err := Parse("testdata/registries/site.yaml", registriesSite(`  registries:
    - upstream: docker.io
      mirrors: [{url: "https://registry.lab:5000", credentialsFile: login.yaml}]
`))
	if err != nil {
		t.Fatal(err)
	}
	m := s.Cluster.Registries[0].Mirrors[0]
	if m.Credentials == nil {
		t.Fatal("no credentials read")
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		for _, v := range []any{s, *s, s.Cluster, m, m.Credentials, *m.Credentials} {
			if out := fmt.Sprintf(format, v); strings.Contains(out, "not-a-secret") {
				t.Errorf("%s of a %T shows the password: %s", format, v, out)
			}
		}
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
