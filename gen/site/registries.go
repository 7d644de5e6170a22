package site

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	k8svalidation "k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/kiln-project/kiln/contract/registries"
	"github.com/kiln-project/kiln/internal/validation"
)

// Registry is an upstream registry, by the name image references give it
// (docker.io, quay.io, registry.example:5000), and the mirrors the nodes
// pull its images from, tried in order before the upstream itself.
type Registry struct {
	Upstream string   `json:"upstream"`
	Mirrors  []Mirror `json:"mirrors"`
}

// Mirror is one mirror of a Registry at its root URL: https, or plain
// http only when Insecure says so. CAFile (PEM certificates) and
// CredentialsFile (YAML: username, password) are paths, relative to the
// site file's directory; Load reads them into CA and Credentials, which
// reach the nodes' configs and nothing else.
type Mirror struct {
	URL             string `json:"url"`
	Insecure        bool   `json:"insecure,omitempty"`
	CAFile          string `json:"caFile,omitempty"`
	CredentialsFile string `json:"credentialsFile,omitempty"`

	CA          []byte       `json:"-"`
	Credentials *Credentials `json:"-"`
}

// Credentials are a mirror's login. They print as a placeholder, so a
// site or a mirror logged or put in an error message does not show them.
type Credentials struct {
	Username string
	Password string
}

func (Credentials) String() string   { return "{login from credentialsFile}" }
func (Credentials) GoString() string { return "site.Credentials{...}" }

// Endpoint is the mirror's URL as scheme://host[:port], without the
// trailing slash the site may give (valid after Load).
func (m Mirror) Endpoint() string {
	u, err := url.Parse(m.URL)
	if err != nil {
		return m.URL
	}
	return u.Scheme + "://" + u.Host
}

// Host is the mirror's host[:port], as its URL gives it: the name
// containerd asks for its login by, and Docker's certs.d directory.
func (m Mirror) Host() string {
	u, err := url.Parse(m.URL)
	if err != nil {
		return ""
	}
	return u.Host
}

// The names Docker Hub answers to besides the one its images carry: an
// upstream given by one of them would match no image.
var dockerHubAliases = []string{"index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"}

func (s *Site) validateRegistries(l *validation.List, p validation.Path) {
	upstreams := map[string]string{}
	logins := map[string]loginAt{} // by mirror host
	for i := range s.Cluster.Registries {
		r := &s.Cluster.Registries[i]
		rp := p.Index(i)
		if validateUpstream(l, rp.Field("upstream"), r.Upstream) {
			if prev, dup := upstreams[r.Upstream]; dup {
				l.Addf(rp.Field("upstream").String(), "duplicate upstream %q (also %s)", r.Upstream, prev)
			}
			upstreams[r.Upstream] = rp.Field("upstream").String()
		}
		if len(r.Mirrors) == 0 {
			l.Addf(rp.Field("mirrors").String(), "at least one mirror is required")
		}
		endpoints := map[string]string{}
		for j := range r.Mirrors {
			m := &r.Mirrors[j]
			mp := rp.Field("mirrors").Index(j)
			if !s.validateMirror(l, mp, m) {
				continue
			}
			if prev, dup := endpoints[m.Endpoint()]; dup {
				l.Addf(mp.Field("url").String(), "duplicate mirror %s (also %s)", m.Endpoint(), prev)
			}
			endpoints[m.Endpoint()] = mp.Field("url").String()
			if m.Credentials == nil {
				continue
			}
			if prev, ok := logins[m.Host()]; ok && *prev.login != *m.Credentials {
				l.Addf(mp.Field("credentialsFile").String(), "a login for %s other than %s's: containerd keeps one login per registry host", m.Host(), prev.path)
			} else if !ok {
				logins[m.Host()] = loginAt{m.Credentials, mp.Field("credentialsFile").String()}
			}
		}
	}
}

type loginAt struct {
	login *Credentials
	path  string
}

// validateUpstream checks a registry's name as image references give it:
// a DNS name or an IP address, with an optional port.
func validateUpstream(l *validation.List, p validation.Path, v string) bool {
	switch {
	case v == "":
		l.Addf(p.String(), "required: the registry's name as image references give it, e.g. docker.io, quay.io or registry.example:5000")
		return false
	case strings.Contains(v, "/"):
		l.Addf(p.String(), "%q is not a registry name: give its host[:port] as image references do, e.g. docker.io (no scheme, no path)", v)
		return false
	case slices.Contains(dockerHubAliases, v):
		l.Addf(p.String(), "Docker Hub's images are named %s/..., not %s/...: give upstream %s", registries.DockerHub, v, registries.DockerHub)
		return false
	}
	if why := checkHostPort(v); why != "" {
		l.Addf(p.String(), "%q is not a registry name (host[:port]): %s", v, why)
		return false
	}
	return true
}

// checkHostPort says what is wrong with host[:port], or returns "".
func checkHostPort(v string) string {
	host := v
	if h, port, err := net.SplitHostPort(v); err == nil {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("port %q is not a port number (1-65535)", port)
		}
		host = h
	} else if strings.Count(v, ":") > 1 {
		return "an IPv6 address needs brackets and a port, e.g. [fd00::1]:5000"
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	if errs := k8svalidation.IsDNS1123Subdomain(host); len(errs) > 0 {
		return "not a DNS name (lower case) or IP address: " + errs[0]
	}
	return ""
}

// validateMirror checks a mirror and reads the files it names into it;
// it reports whether its URL is valid.
func (s *Site) validateMirror(l *validation.List, p validation.Path, m *Mirror) bool {
	u, ok := validateMirrorURL(l, p, m)
	plain := u != nil && u.Scheme == "http"
	if m.CAFile != "" {
		if plain {
			l.Addf(p.Field("caFile").String(), "an http:// mirror has no certificate to check: leave caFile out")
		} else if ca, err := readCABundle(s.resolve(m.CAFile)); err != nil {
			l.Addf(p.Field("caFile").String(), "%v", err)
		} else {
			m.CA = ca
		}
	}
	if m.CredentialsFile != "" {
		if plain {
			l.Addf(p.Field("credentialsFile").String(), "a login sent to an http:// mirror crosses the network in clear: use https")
		} else if c, err := readCredentials(s.resolve(m.CredentialsFile)); err != nil {
			l.Addf(p.Field("credentialsFile").String(), "%v", err)
		} else {
			m.Credentials = c
		}
	}
	return ok
}

// validateMirrorURL checks the mirror's URL; it returns it parsed (nil
// when it does not parse) and whether it is valid.
func validateMirrorURL(l *validation.List, p validation.Path, m *Mirror) (*url.URL, bool) {
	up := p.Field("url").String()
	if m.URL == "" {
		l.Addf(up, "required: the mirror's root, e.g. https://registry.example:5000")
		return nil, false
	}
	u, err := url.Parse(m.URL)
	if err != nil {
		l.Addf(up, "not a URL (e.g. https://registry.example:5000)")
		return nil, false
	}
	if u.User != nil {
		// The URL is not repeated: it holds a secret.
		l.Addf(up, "holds a user name or password: give the login in credentialsFile, which stays out of the site file")
		return u, false
	}
	switch {
	case u.Scheme == "https":
		if m.Insecure {
			l.Addf(p.Field("insecure").String(), "insecure: true is for http:// mirrors; an https mirror's certificate is always checked (give its CA in caFile)")
		}
	case u.Scheme == "http" && m.Insecure:
	case u.Scheme == "http":
		l.Addf(up, "%s is not https: a mirror over plain http needs insecure: true (its images cross the network unprotected)", m.URL)
		return u, false
	default:
		l.Addf(up, "%s is not an https:// URL (or http:// with insecure: true)", m.URL)
		return u, false
	}
	switch {
	case u.Host == "":
		l.Addf(up, "%s names no host", m.URL)
	case u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "":
		l.Addf(up, "%s: a mirror is given by its root, %s://host[:port], without a path, query or fragment (Docker refuses them too)", m.URL, u.Scheme)
	default:
		if why := checkHostPort(u.Host); why != "" {
			l.Addf(up, "%s: %s", m.URL, why)
			return u, false
		}
		return u, true
	}
	return u, false
}

// resolve makes a path the site gives relative to the site file's
// directory.
func (s *Site) resolve(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(s.File), p)
}

// maxSiteFile bounds a file the site names: it is copied into every
// node's config.
const maxSiteFile = 1 << 20

func readSmall(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", path, withoutPath(err))
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%s is a directory", path)
	}
	if fi.Size() > maxSiteFile {
		return nil, fmt.Errorf("%s is larger than %d KiB", path, maxSiteFile>>10)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", path, withoutPath(err))
	}
	return data, nil
}

// withoutPath is a file error without the operation and path, which the
// caller's message gives.
func withoutPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// readCABundle reads PEM certificates, and nothing else: a private key
// in the bundle would reach every node. Text around the blocks is
// ignored, as containerd and Docker ignore it.
func readCABundle(path string) ([]byte, error) {
	data, err := readSmall(path)
	if err != nil {
		return nil, err
	}
	n := 0
	for b, rest := pem.Decode(data); b != nil; b, rest = pem.Decode(rest) {
		n++
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s: PEM block %d is a %s, not a CERTIFICATE: give the CA's certificates only", path, n, b.Type)
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return nil, fmt.Errorf("%s: certificate %d does not parse: %v", path, n, err)
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate (-----BEGIN CERTIFICATE-----)", path)
	}
	return data, nil
}

// readCredentials reads a login file: YAML with username and password.
// What it says about the file never quotes it.
func readCredentials(path string) (*Credentials, error) {
	data, err := readSmall(path)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil || doc == nil {
		return nil, fmt.Errorf("%s is not YAML with username and password (its contents are not shown: they are a secret)", path)
	}
	var c Credentials
	var problems []string
	for _, k := range slices.Sorted(maps.Keys(doc)) {
		v, isString := doc[k].(string)
		switch {
		case k != "username" && k != "password":
			problems = append(problems, fmt.Sprintf("unknown key %q (only username and password)", k))
		case !isString:
			problems = append(problems, k+" is not a string (quote it)")
		case k == "username":
			c.Username = v
		default:
			c.Password = v
		}
	}
	if len(problems) == 0 {
		problems = checkLogin(c)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s: %s", path, strings.Join(problems, "; "))
	}
	return &c, nil
}

// checkLogin says what keeps a login from HTTP basic authentication and
// from containerd's configuration.
func checkLogin(c Credentials) []string {
	var problems []string
	if c.Username == "" {
		problems = append(problems, "username is missing or empty")
	} else if strings.Contains(c.Username, ":") {
		problems = append(problems, "the username holds a colon, which HTTP basic authentication cannot carry")
	}
	if c.Password == "" {
		problems = append(problems, "password is missing or empty")
	}
	for _, f := range []struct{ name, v string }{{"username", c.Username}, {"password", c.Password}} {
		if !utf8.ValidString(f.v) || strings.ContainsFunc(f.v, unicode.IsControl) {
			problems = append(problems, "the "+f.name+" holds a control character or is not UTF-8")
		}
	}
	return problems
}
