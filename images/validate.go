package images

import (
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/internal/validation"
)

var (
	debPackageName = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	imageName      = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	sha256Hex      = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Parse decodes and validates a spec. name is the file name used in error
// messages; dir resolves relative paths in the spec. All problems are
// returned at once as a *validation.List.
func Parse(name string, data []byte, dir string) (*Spec, error) {
	l := &validation.List{File: name}
	var s Spec
	if !validation.DecodeStrict(data, &s, l) {
		return nil, l
	}
	s.Dir, s.Hash = dir, hashOf(data)
	s.validate(l)
	if err := l.Err(); err != nil {
		return nil, err
	}
	return &s, nil
}

func (s *Spec) validate(l *validation.List) {
	if s.APIVersion != APIVersion {
		l.Addf("apiVersion", "must be %q, not %q", APIVersion, s.APIVersion)
	}
	if s.Kind != Kind {
		l.Addf("kind", "must be %q, not %q", Kind, s.Kind)
	}
	if !imageName.MatchString(s.Metadata.Name) {
		l.Addf("metadata.name", "%q is not a lower-case DNS label", s.Metadata.Name)
	}
	s.validateBase(l)
	s.validatePackages(l)
	s.validatePayload(l)
	s.validateComponents(l)
	s.validateOutputs(l)
	s.validatePrune(l)
	for i, b := range s.ConfigTrust.CABundles {
		if strings.TrimSpace(b) == "" {
			l.Addf(validation.Path("configTrust.caBundles").Index(i).String(), "must be the path of a PEM file")
		}
	}
	if s.SourceDateEpoch <= 0 {
		l.Addf("sourceDateEpoch", "must be a positive Unix time (it fixes every timestamp in the image)")
	}
	switch s.Squashfs.Compression {
	case "zstd":
		if s.Squashfs.Level < 1 || s.Squashfs.Level > 22 {
			l.Addf("squashfs.level", "zstd level must be 1..22, not %d", s.Squashfs.Level)
		}
	case "xz", "gzip", "lz4":
	default:
		l.Addf("squashfs.compression", "%q is not one of zstd, xz, gzip, lz4", s.Squashfs.Compression)
	}
}

func (s *Spec) validateBase(l *validation.List) {
	if s.Base.Suite != "bookworm" {
		l.Addf("base.suite", "%q is not supported (supported: bookworm)", s.Base.Suite)
	}
	if u, err := url.Parse(s.Base.Mirror); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		l.Addf("base.mirror", "%q is not an http(s) URL", s.Base.Mirror)
	}
	if s.Base.Arch != "amd64" {
		l.Addf("base.arch", "%q is not supported (supported: amd64)", s.Base.Arch)
	}
}

func (s *Spec) validatePackages(l *validation.List) {
	if len(s.Packages) == 0 {
		l.Addf("packages", "must list at least the kernel and systemd")
	}
	seen := map[string]int{}
	for i, p := range s.Packages {
		path := validation.Path("packages").Index(i).String()
		if !debPackageName.MatchString(p) {
			l.Addf(path, "%q is not a Debian package name", p)
		}
		if j, dup := seen[p]; dup {
			l.Addf(path, "%q is listed twice (also packages[%d])", p, j)
		}
		seen[p] = i
	}
	for _, required := range []string{"systemd", "dracut", "dracut-live", "dracut-network", s.Kernel.Package} {
		if _, ok := seen[required]; !ok && required != "" {
			l.Addf("packages", "must include %q (the boot chain needs it)", required)
		}
	}
	if s.Kernel.Package == "" {
		l.Addf("kernel.package", "is required")
	}
	for i, arg := range s.Kernel.Cmdline {
		if err := bootslot.CheckArg(arg); err != nil {
			l.Addf(validation.Path("kernel.cmdline").Index(i).String(), "must be one argument that GRUB and iPXE pass as it is: %v", err)
		}
	}
	if n := len(strings.Join(s.Kernel.Cmdline, " ")); n > bootslot.MaxArgsBytes {
		l.Addf("kernel.cmdline", "%d bytes joined, more than %d", n, bootslot.MaxArgsBytes)
	}
}

func (s *Spec) validatePayload(l *validation.List) {
	for i, f := range s.Payload.Files {
		p := validation.Path("payload.files").Index(i)
		if !filepath.IsAbs(f.Path) || filepath.Clean(f.Path) != f.Path {
			l.Addf(p.Field("path").String(), "%q must be a clean absolute path", f.Path)
		}
		if err := checkSource(f.Source); err != nil {
			l.Addf(p.Field("source").String(), "%v", err)
		}
		if !sha256Hex.MatchString(f.SHA256) {
			l.Addf(p.Field("sha256").String(), "must be 64 lower-case hex digits")
		}
		if f.Mode != "" {
			if m, err := strconv.ParseUint(f.Mode, 8, 32); err != nil || m > 0o7777 {
				l.Addf(p.Field("mode").String(), "%q is not an octal file mode", f.Mode)
			}
		}
	}
}

var componentVersion = regexp.MustCompile(`^v\d+\.\d+\.\d+$`)

func (s *Spec) validateComponents(l *validation.List) {
	c := s.Components
	if c == nil {
		return
	}
	for _, nc := range c.Each() {
		p := validation.Path("components").Field(nc.Name)
		if !componentVersion.MatchString(nc.Version) {
			l.Addf(p.Field("version").String(), "%q is not a release version like v1.2.3", nc.Version)
		}
		seen := map[string]bool{}
		for i, b := range nc.Binaries {
			bp := p.Field("binaries").Index(i)
			if !slices.Contains(Programs[nc.Name], b.Name) {
				l.Addf(bp.Field("name").String(), "%q is not a program of %s (its programs: %s)", b.Name, nc.Name, strings.Join(Programs[nc.Name], ", "))
			}
			if seen[b.Name] {
				l.Addf(bp.Field("name").String(), "%q is listed twice", b.Name)
			}
			seen[b.Name] = true
			if err := checkSource(b.Source); err != nil {
				l.Addf(bp.Field("source").String(), "%v", err)
			}
			if !sha256Hex.MatchString(b.SHA256) {
				l.Addf(bp.Field("sha256").String(), "must be 64 lower-case hex digits")
			}
		}
	}
	for i, a := range c.Images {
		p := validation.Path("components.images").Index(i)
		if err := checkSource(a.Source); err != nil {
			l.Addf(p.Field("source").String(), "%v", err)
		}
		if !sha256Hex.MatchString(a.SHA256) {
			l.Addf(p.Field("sha256").String(), "must be 64 lower-case hex digits")
		}
	}
}

func checkSource(src string) error {
	if src == "" {
		return fmt.Errorf("is required")
	}
	if !strings.Contains(src, "://") {
		return nil // a path relative to the spec file
	}
	u, err := url.Parse(src)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %w", src, err)
	}
	if u.Scheme != "file" && u.Scheme != "https" && u.Scheme != "http" {
		return fmt.Errorf("%q: scheme must be file, http or https", src)
	}
	return nil
}

func (s *Spec) validateOutputs(l *validation.List) {
	if len(s.Outputs) == 0 {
		l.Addf("outputs", "must name at least one of iso, raw, pxe")
	}
	seen := map[Output]bool{}
	for i, o := range s.Outputs {
		switch o {
		case OutputISO, OutputRaw, OutputPXE:
		default:
			l.Addf(validation.Path("outputs").Index(i).String(), "%q is not one of iso, raw, pxe", o)
		}
		if seen[o] {
			l.Addf(validation.Path("outputs").Index(i).String(), "%q is listed twice", o)
		}
		seen[o] = true
	}
}

func dirOf(path string) string { return filepath.Dir(path) }

// neverPruned are the directories a prune path may lie under but never be:
// removing one would leave no system to boot.
var neverPruned = []string{"/", "/bin", "/boot", "/etc", "/lib", "/lib64", "/sbin", "/usr", "/usr/bin", "/usr/lib", "/usr/sbin", "/var", "/usr/lib/modules", "/usr/lib/modules/*"}

func (s *Spec) validatePrune(l *validation.List) {
	for i, p := range s.Prune.Paths {
		path := validation.Path("prune.paths").Index(i).String()
		if err := checkGlob(p); err != nil {
			l.Addf(path, "%v", err)
		} else if slices.Contains(neverPruned, p) {
			l.Addf(path, "%q would remove the system itself; name what under it to prune", p)
		}
	}
	for i, k := range s.Prune.Keep {
		path := validation.Path("prune.keep").Index(i).String()
		if err := checkGlob(k); err != nil {
			l.Addf(path, "%v", err)
			continue
		}
		if !slices.ContainsFunc(s.Prune.Paths, func(p string) bool { return GlobWithin(k, p) }) {
			l.Addf(path, "%q is not under any of prune.paths, so it is kept anyway", k)
		}
	}
}

func checkGlob(p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return fmt.Errorf("%q must be a clean absolute path (a glob)", p)
	}
	if _, err := filepath.Match(p, p); err != nil {
		return fmt.Errorf("%q is not a valid glob: %v", p, err)
	}
	return nil
}

// GlobWithin reports whether every path glob inner matches lies at or under
// some path glob outer matches, component by component: outer's
// components match inner's leading ones. ("/a/*/c/d" is within "/a/*/c".)
func GlobWithin(inner, outer string) bool {
	in, out := strings.Split(inner, "/"), strings.Split(outer, "/")
	if len(in) < len(out) {
		return false
	}
	for i, o := range out {
		if o == in[i] {
			continue
		}
		if ok, err := filepath.Match(o, in[i]); err != nil || !ok {
			return false
		}
	}
	return true
}
