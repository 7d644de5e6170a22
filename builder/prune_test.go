package builder

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/images"
)

func TestPruneTreeRemovesPathsAndKeepsWhatKeepNames(t *testing.T) {
	files := []string{
		"/var/lib/apt/lists/deb.debian.org_Packages",
		"/var/lib/apt/extended_states",
		"/usr/lib/modules/6.1.0-1-amd64/kernel/sound/core/snd.ko",
		"/usr/lib/modules/6.1.0-1-amd64/kernel/drivers/gpu/drm/drm.ko",
		"/usr/lib/modules/6.1.0-1-amd64/kernel/drivers/gpu/drm/ast/ast.ko",
		"/usr/lib/modules/6.1.0-1-amd64/kernel/drivers/gpu/drm/amd/amdgpu/amdgpu.ko",
		"/usr/lib/modules/6.1.0-1-amd64/kernel/drivers/net/virtio_net.ko",
		"/usr/bin/containerd-shim",
		"/usr/bin/containerd-shim-runc-v2",
	}
	tests := []struct {
		name        string
		prune       images.Prune
		gone, stays []string
		paths       int
		modules     bool
	}{
		{
			name:  "apt lists and a tool",
			prune: images.Prune{Paths: []string{"/var/lib/apt/lists", "/usr/bin/containerd-shim"}},
			gone:  []string{"/var/lib/apt/lists", "/usr/bin/containerd-shim"},
			stays: []string{"/var/lib/apt/extended_states", "/usr/bin/containerd-shim-runc-v2", "/usr/lib/modules/6.1.0-1-amd64/kernel/sound/core/snd.ko"},
			paths: 2,
		},
		{
			name: "module directories by glob, keeping one driver and the drm core",
			prune: images.Prune{
				Paths: []string{"/usr/lib/modules/*/kernel/sound", "/usr/lib/modules/*/kernel/drivers/gpu"},
				Keep:  []string{"/usr/lib/modules/*/kernel/drivers/gpu/drm/*.ko", "/usr/lib/modules/*/kernel/drivers/gpu/drm/ast"},
			},
			gone: []string{"/usr/lib/modules/6.1.0-1-amd64/kernel/sound", "/usr/lib/modules/6.1.0-1-amd64/kernel/drivers/gpu/drm/amd"},
			stays: []string{"/usr/lib/modules/6.1.0-1-amd64/kernel/drivers/gpu/drm/drm.ko", "/usr/lib/modules/6.1.0-1-amd64/kernel/drivers/gpu/drm/ast/ast.ko",
				"/usr/lib/modules/6.1.0-1-amd64/kernel/drivers/net/virtio_net.ko"},
			paths:   2,
			modules: true,
		},
		{
			name:  "a glob that matches nothing",
			prune: images.Prune{Paths: []string{"/usr/sbin/ovrouter"}},
			stays: files,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range files {
				p := filepath.Join(root, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(strings.Repeat("x", 100)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			res, err := pruneTree(root, tc.prune)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range tc.gone {
				if _, err := os.Lstat(filepath.Join(root, g)); !os.IsNotExist(err) {
					t.Errorf("%s is still there (err %v)", g, err)
				}
			}
			for _, s := range tc.stays {
				if _, err := os.Lstat(filepath.Join(root, s)); err != nil {
					t.Errorf("%s was removed: %v", s, err)
				}
			}
			var removed int64
			for _, f := range files {
				if _, err := os.Lstat(filepath.Join(root, f)); os.IsNotExist(err) {
					removed += 100
				}
			}
			if res.Paths != tc.paths || res.Bytes != removed || res.Modules != tc.modules {
				t.Errorf("result = %+v, want %d paths, %d bytes, modules %v", res, tc.paths, removed, tc.modules)
			}
		})
	}
}

func TestMissingDepsNamesKeptModulesWhosePrunedDependencies(t *testing.T) {
	dir := t.TempDir()
	for _, m := range []string{"kernel/drivers/gpu/drm/ast/ast.ko", "kernel/drivers/gpu/drm/drm.ko", "kernel/net/bridge/bridge.ko", "kernel/net/802/stp.ko"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(m)), 0o755)
		os.WriteFile(filepath.Join(dir, m), nil, 0o644)
	}
	dep := "kernel/drivers/gpu/drm/ast/ast.ko: kernel/drivers/gpu/drm/drm_kms_helper.ko kernel/drivers/gpu/drm/drm.ko\n" +
		"kernel/net/bridge/bridge.ko: kernel/net/802/stp.ko\n" +
		"kernel/sound/core/snd.ko: kernel/sound/soundcore.ko\n"
	got := missingDeps(dir, []byte(dep))
	want := []string{"kernel/drivers/gpu/drm/ast/ast.ko needs kernel/drivers/gpu/drm/drm_kms_helper.ko"}
	if !slices.Equal(got, want) {
		t.Errorf("missingDeps = %q, want %q (a pruned module's own dependencies do not count)", got, want)
	}
}

func TestContentSizesCountEachPartOnceAndTheRest(t *testing.T) {
	root := t.TempDir()
	for p, n := range map[string]int{
		"/usr/lib/modules/6.1/kernel/a.ko": 300,
		"/usr/lib/kiln/images/pause.tar":   200,
		"/usr/bin/kubelet":                 50,
		"/usr/bin/kiln":                    40,
		"/etc/hostname":                    7,
	} {
		path := filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte(strings.Repeat("x", n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	parts, err := contentSizes(root)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, p := range parts {
		got[p.Part] = p.Bytes
	}
	want := map[string]int64{"kernel modules": 300, "container image archives": 200, "kubelet, kubectl, containerd (built)": 50,
		"kiln agent": 40, "firmware": 0, "the rest": 7}
	for part, n := range want {
		if got[part] != n {
			t.Errorf("%s: %d bytes, want %d (all: %v)", part, got[part], n, got)
		}
	}
}
