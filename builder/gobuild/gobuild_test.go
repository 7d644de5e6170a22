package gobuild

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const kubeGoMod = `module k8s.io/kubernetes

go 1.24.0

require (
	k8s.io/api v0.0.0
	github.com/foo/bar v1.2.3
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/client-go => ./staging/src/k8s.io/client-go
	github.com/foo/bar => github.com/foo/bar v1.2.4
)

replace k8s.io/kubelet => ./staging/src/k8s.io/kubelet
`

func TestKubernetesTarget(t *testing.T) {
	tg, err := KubernetesTarget("v1.37.1", []byte(kubeGoMod), "2025-01-01T00:00:00Z")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"k8s.io/api": "v0.37.1", "k8s.io/client-go": "v0.37.1", "k8s.io/kubelet": "v0.37.1"}
	if len(tg.Replace) != len(want) {
		t.Errorf("replace %v, want %v", tg.Replace, want)
	}
	for m, v := range want {
		if tg.Replace[m] != v {
			t.Errorf("replace %s => %s, want %s", m, tg.Replace[m], v)
		}
	}
	if !slices.Contains(tg.LDFlags, "-X k8s.io/component-base/version.gitVersion=v1.37.1") ||
		!slices.Contains(tg.LDFlags, "-X k8s.io/component-base/version.gitMinor=37") {
		t.Errorf("ldflags %v", tg.LDFlags)
	}
	if len(tg.Packages) != len(KubernetesCommands) || tg.Packages[0] != "k8s.io/kubernetes/cmd/kubelet" {
		t.Errorf("packages %v", tg.Packages)
	}
	for _, bad := range []string{"1.37.1", "v2.0.0", "v1.37"} {
		if _, err := KubernetesTarget(bad, []byte(kubeGoMod), ""); err == nil {
			t.Errorf("version %q accepted", bad)
		}
	}
	if _, err := KubernetesTarget("v1.37.1", []byte("module x\n"), ""); err == nil {
		t.Error("a go.mod without staging modules accepted")
	}
	other, _ := KubernetesTarget("v1.37.0", []byte(kubeGoMod), "2025-01-01T00:00:00Z")
	if other.Key() == tg.Key() {
		t.Error("two versions share a cache key")
	}
}

// A real build through the module proxy (the module is small and already
// a dependency of kiln's tests), then a cache hit.
func TestBuildRealProgramAndCache(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	b := Builder{CacheDir: t.TempDir(), Log: &bytes.Buffer{}}
	tg := Target{Name: "txtar", Module: "github.com/rogpeppe/go-internal", Version: "v1.14.1",
		Packages: []string{"github.com/rogpeppe/go-internal/cmd/txtar-c"}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bins, err := b.Build(ctx, tg)
	if err != nil {
		t.Fatalf("%v\n%s", err, b.Log)
	}
	bin := bins["txtar-c"]
	out, err := exec.Command(bin, "-h").CombinedOutput()
	if !strings.Contains(string(out), "usage") {
		t.Errorf("%s -h: %v: %s", bin, err, out)
	}
	if data, _ := os.ReadFile(bin); bytes.Contains(data, []byte(b.CacheDir)) {
		t.Error("the binary holds a build path (-trimpath missing)")
	}
	fi, _ := os.Stat(bin)
	start := time.Now()
	if _, err := b.Build(ctx, tg); err != nil {
		t.Fatal(err)
	}
	fi2, _ := os.Stat(bin)
	if !fi2.ModTime().Equal(fi.ModTime()) || time.Since(start) > 5*time.Second {
		t.Error("the second build did not come from the cache")
	}
	if leftovers, _ := filepath.Glob(filepath.Join(b.CacheDir, "gobuild", ".build-*")); len(leftovers) > 0 {
		t.Errorf("work directories left: %v", leftovers)
	}
}

func TestBinaryNames(t *testing.T) {
	for _, tc := range []struct{ pkg, want string }{
		{"k8s.io/kubernetes/cmd/kubelet", "kubelet"},
		{"go.etcd.io/etcd/server/v3", "server"},
		{"github.com/coredns/coredns", "coredns"},
		{"example.com/v", "v"},
	} {
		if got := goBinaryName(tc.pkg); got != tc.want {
			t.Errorf("goBinaryName(%s) = %s, want %s", tc.pkg, got, tc.want)
		}
	}
	if got := EtcdTarget("v3.6.5").binaryName("go.etcd.io/etcd/server/v3"); got != "etcd" {
		t.Errorf("etcd binary named %s", got)
	}
}
