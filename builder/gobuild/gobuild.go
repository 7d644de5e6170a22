// Package gobuild builds pinned Go programs from their modules through the
// Go module proxy, static and reproducible, and caches the binaries by a
// hash of everything that went into them. It is how kiln gets the
// Kubernetes components, etcd and CoreDNS when no release URL is given.
//
// A target is built in a throwaway wrapper module that requires the
// program's module at its version; Kubernetes needs its staging modules
// (k8s.io/api, ...) replaced by their published v0.x versions, which
// KubernetesReplaces derives from the module's own go.mod. A target may
// also bring its own main package (Target.Main), compiled in the wrapper
// module against the target's module: how CoreDNS is built with only the
// plugins kiln configures.
package gobuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Target is a set of programs from one module at one version.
type Target struct {
	Name     string            // for messages and the cache path, e.g. "kubernetes"
	Module   string            // e.g. k8s.io/kubernetes; "" for a Main of the standard library alone
	Version  string            // e.g. v1.37.1
	Packages []string          // import paths of the main packages
	Replace  map[string]string // module -> version, pinned in the wrapper
	LDFlags  []string          // e.g. -X k8s.io/component-base/version.gitVersion=v1.37.1
	Tags     []string          // build tags
	Names    map[string]string // package -> binary name, when not the go tool's
	Cold     string            `json:"-"` // what a cold build takes on 2 cores, for the progress line; not in the key
	// Main, when set, is a main package of the target's own: file name
	// (a plain *.go name) -> Go source, written into the wrapper module's
	// root and built as the binary Name, besides Packages. It is part of
	// the cache key, since the source decides the binary.
	Main map[string]string
}

// modulePath is the wrapper module's path; its root package is the
// target's Main, which go build names after the last element: Name.
func (t Target) modulePath() string { return "kiln.local/build/" + t.Name }

// programs are the import paths of the main packages to build: Packages,
// then the wrapper's own main package when Main is set.
func (t Target) programs() []string {
	if len(t.Main) == 0 {
		return t.Packages
	}
	return append(slices.Clip(t.Packages), t.modulePath())
}

// binaryName is what go build names a package's binary (the last path
// element, or the one before a /vN suffix), unless Names says otherwise.
func (t Target) binaryName(pkg string) string {
	if n, ok := t.Names[pkg]; ok {
		return n
	}
	return goBinaryName(pkg)
}

func goBinaryName(pkg string) string {
	base := path.Base(pkg)
	if len(base) > 1 && base[0] == 'v' && strings.Trim(base[1:], "0123456789") == "" {
		return path.Base(path.Dir(pkg))
	}
	return base
}

// Key is the cache key: the target and the Go toolchain that builds it.
func (t Target) Key() string {
	data, _ := json.Marshal(struct {
		T  Target
		Go string
	}{t, runtime.Version()})
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:16]
}

// Binaries maps each program's name (the last element of its package
// path) to its path.
type Binaries map[string]string

// Builder builds targets into a cache directory.
type Builder struct {
	CacheDir string    // binaries go under CacheDir/gobuild/<name>-<version>-<key>/
	Log      io.Writer // progress and the go tool's output
	Go       string    // the go command; "" means "go"
}

// Build returns the target's binaries, from the cache when they are there.
// A build happens in a temporary directory and is moved into the cache
// only when every program built.
func (b Builder) Build(ctx context.Context, t Target) (Binaries, error) {
	dir := filepath.Join(b.CacheDir, "gobuild", fmt.Sprintf("%s-%s-%s", t.Name, t.Version, t.Key()))
	bins := Binaries{}
	for _, p := range t.programs() {
		bins[t.binaryName(p)] = filepath.Join(dir, t.binaryName(p))
	}
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		fmt.Fprintf(b.log(), "%s %s: cached in %s\n", t.Name, t.Version, dir)
		return bins, nil
	}
	start := time.Now()
	cold := ""
	if t.Cold != "" {
		cold = " (cold on 2 cores: " + t.Cold + ")"
	}
	from := "the module proxy"
	if t.Module == "" {
		from = "the standard library alone"
	}
	fmt.Fprintf(b.log(), "%s %s: building %d program(s) from %s%s\n", t.Name, t.Version, len(t.programs()), from, cold)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp(filepath.Dir(dir), ".build-"+t.Name+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	if err := b.wrapper(ctx, t, work); err != nil {
		return nil, fmt.Errorf("%s %s: preparing the build module: %w", t.Name, t.Version, err)
	}
	out := filepath.Join(work, "bin")
	args := []string{"build", "-trimpath", "-o", out + "/", "-ldflags", strings.Join(append([]string{"-s", "-w", "-buildid="}, t.LDFlags...), " ")}
	if len(t.Tags) > 0 {
		args = append(args, "-tags", strings.Join(t.Tags, ","))
	}
	prog := &progress{log: b.log(), what: t.Name + " " + t.Version, total: b.countPackages(ctx, work, t), start: time.Now()}
	stop := make(chan struct{})
	go prog.every(progressEvery, stop)
	err = b.runTo(ctx, work, prog, append(append(args, "-v"), t.programs()...)...)
	close(stop)
	if err != nil {
		return nil, fmt.Errorf("%s %s: go build: %w", t.Name, t.Version, err)
	}
	for _, p := range t.programs() {
		if want, got := t.binaryName(p), goBinaryName(p); want != got {
			if err := os.Rename(filepath.Join(out, got), filepath.Join(out, want)); err != nil {
				return nil, err
			}
		}
	}
	if err := os.WriteFile(filepath.Join(out, ".complete"), []byte(time.Since(start).String()+"\n"), 0o644); err != nil {
		return nil, err
	}
	os.RemoveAll(dir)
	if err := os.Rename(out, dir); err != nil {
		return nil, err
	}
	fmt.Fprintf(b.log(), "%s %s: built in %s\n", t.Name, t.Version, time.Since(start).Round(time.Second))
	return bins, nil
}

// wrapper writes the wrapper module: a go.mod requiring the target (and
// pinning its replacements), a file importing every main package so the
// module graph holds them, and the target's Main files.
func (b Builder) wrapper(ctx context.Context, t Target, dir string) error {
	var mod strings.Builder
	fmt.Fprintf(&mod, "module %s\n\ngo 1.24\n", t.modulePath())
	if t.Module != "" { // a Main of the standard library alone requires nothing
		fmt.Fprintf(&mod, "\nrequire %s %s\n", t.Module, t.Version)
	}
	for _, m := range slices.Sorted(maps.Keys(t.Replace)) {
		fmt.Fprintf(&mod, "replace %s => %s %s\n", m, m, t.Replace[m])
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod.String()), 0o644); err != nil {
		return err
	}
	// tools.go shares the root directory with Main's files, so it takes
	// their package name; its build tag keeps it out of the binary.
	pkgName := "tools"
	if len(t.Main) > 0 {
		pkgName = "main"
	}
	for _, name := range slices.Sorted(maps.Keys(t.Main)) {
		if name != filepath.Base(name) || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || name == "tools.go" {
			return fmt.Errorf("main file %q: want a plain .go file name other than tools.go", name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(t.Main[name]), 0o644); err != nil {
			return err
		}
	}
	var imports strings.Builder
	fmt.Fprintf(&imports, "//go:build tools\n\npackage %s\n\nimport (\n", pkgName)
	for _, p := range t.Packages {
		fmt.Fprintf(&imports, "\t_ %q\n", p)
	}
	imports.WriteString(")\n")
	if err := os.WriteFile(filepath.Join(dir, "tools.go"), []byte(imports.String()), 0o644); err != nil {
		return err
	}
	return b.run(ctx, dir, "mod", "tidy")
}

// fetchParallelism is how many modules go mod fetches at once. The go
// command sizes its download queue by GOMAXPROCS, two on a 2-core
// machine, and fetching is bound by the proxy's latency, not the CPU:
// CoreDNS's 257 MB of modules take 76 s at 2 and 23 s at 16.
const fetchParallelism = "16"

func (b Builder) run(ctx context.Context, dir string, args ...string) error {
	return b.runTo(ctx, dir, b.log(), args...)
}

// runTo runs the go command in dir with its output to w.
func (b Builder) runTo(ctx context.Context, dir string, w io.Writer, args ...string) error {
	cmd := b.command(ctx, dir, args...)
	cmd.Stdout, cmd.Stderr = w, w
	return cmd.Run()
}

func (b Builder) command(ctx context.Context, dir string, args ...string) *exec.Cmd {
	goCmd := b.Go
	if goCmd == "" {
		goCmd = "go"
	}
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
	if args[0] == "mod" {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+fetchParallelism)
	}
	return cmd
}

// countPackages is how many packages building t's programs involves, the
// standard library's included (go list -deps): the most go build -v can
// name. 0 when go list fails; the build then reports a bare count.
func (b Builder) countPackages(ctx context.Context, dir string, t Target) int {
	args := []string{"list", "-deps"}
	if len(t.Tags) > 0 {
		args = append(args, "-tags", strings.Join(t.Tags, ","))
	}
	out, err := b.command(ctx, dir, append(args, t.programs()...)...).Output()
	if err != nil {
		return 0
	}
	return strings.Count(string(out), "\n")
}

func (b Builder) log() io.Writer {
	if b.Log == nil {
		return io.Discard
	}
	return b.Log
}

// DefaultCacheDir is kiln's cache directory, shared by the builder and
// these builds: $KILN_CACHE, else ~/.cache/kiln.
func DefaultCacheDir() string {
	if d := os.Getenv("KILN_CACHE"); d != "" {
		return d
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".cache", "kiln")
	}
	return ".kiln-cache"
}
