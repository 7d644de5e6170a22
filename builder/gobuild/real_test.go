package gobuild

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/images"
)

// Pinned versions kiln builds by default.
const (
	testKubernetes = "v1.37.1"
	testEtcd       = "v3.6.5"
	testCoreDNS    = "v1.15.0"
	testContainerd = "v2.2.9"
)

// The real builds of the components the node image carries, through the
// module proxy: slow cold (about 15 min for Kubernetes on 2 cores), so
// they run with KILN_COMPONENTS=1 (make components) into $KILN_CACHE.
// The pinned versions must match images/node.yaml (TestPinsMatchTheDefaultSpec).
func TestBuildComponents(t *testing.T) {
	if os.Getenv("KILN_COMPONENTS") != "1" {
		t.Skip("set KILN_COMPONENTS=1 to build Kubernetes, etcd and CoreDNS (make components)")
	}
	cache := DefaultCacheDir()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	goMod, err := ModuleGoMod(ctx, "k8s.io/kubernetes", testKubernetes)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := KubernetesTarget(testKubernetes, goMod, "2025-01-01T00:00:00Z")
	if err != nil {
		t.Fatal(err)
	}
	b := Builder{CacheDir: cache, Log: testWriter{t}}
	for _, tc := range []struct {
		target  Target
		bin     string
		args    []string
		version string
	}{
		{kube, "kubelet", []string{"--version"}, "Kubernetes " + testKubernetes},
		{kube, "kube-apiserver", []string{"--version"}, "Kubernetes " + testKubernetes},
		{kube, "kube-proxy", []string{"--version"}, "Kubernetes " + testKubernetes},
		{EtcdTarget(testEtcd), "etcd", []string{"--version"}, strings.TrimPrefix(testEtcd, "v")},
		{CoreDNSTarget(testCoreDNS), "coredns", []string{"-version"}, "CoreDNS-" + strings.TrimPrefix(testCoreDNS, "v")},
		{ContainerdTarget(testContainerd), "containerd", []string{"--version"}, "containerd github.com/containerd/containerd " + testContainerd},
		{ContainerdTarget(testContainerd), "ctr", []string{"--version"}, "ctr github.com/containerd/containerd " + testContainerd},
	} {
		bins, err := b.Build(ctx, tc.target)
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bins[tc.bin], tc.args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), tc.version) {
			t.Errorf("%s %v: %v: %s (want %q)", tc.bin, tc.args, err, out, tc.version)
		}
		fi, _ := os.Stat(bins[tc.bin])
		t.Logf("%s: %s, %.1f MiB", tc.bin, strings.TrimSpace(string(out)), float64(fi.Size())/(1<<20))
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// make components warms the cache for exactly what make image bakes.
func TestPinsMatchTheDefaultSpec(t *testing.T) {
	spec, err := images.Load("")
	if err != nil {
		t.Fatal(err)
	}
	c := spec.Components
	for _, p := range [][2]string{{c.Kubernetes.Version, testKubernetes}, {c.Etcd.Version, testEtcd}, {c.CoreDNS.Version, testCoreDNS}, {c.Containerd.Version, testContainerd}} {
		if p[0] != p[1] {
			t.Errorf("images/node.yaml pins %s, make components builds %s", p[0], p[1])
		}
	}
}
