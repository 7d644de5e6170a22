package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kiln upgrade refuses bad input as usage errors (exit 2), naming the
// flag and the file, before it reaches the cluster.
func TestUpgradeRefusesBadInputWithStatus2(t *testing.T) {
	const siteFile = "../../examples/site.yaml"
	dir := t.TempDir()
	pkiDir := filepath.Join(dir, "pki")
	os.MkdirAll(pkiDir, 0o700)
	notJSON := filepath.Join(dir, "not-json")
	os.MkdirAll(notJSON, 0o755)
	os.WriteFile(filepath.Join(notJSON, "node.manifest.json"), []byte("<html>"), 0o644)
	missing := filepath.Join(dir, "missing")
	os.MkdirAll(missing, 0o755)
	os.WriteFile(filepath.Join(missing, "node.manifest.json"), []byte(`{"name": "node",
  "binaries": [{"path": "/usr/bin/kiln", "sha256": "0522", "size": 1}],
  "images": [{"role": "etcd", "ref": "kiln.local/etcd:v3.6.5"}, {"role": "kube-apiserver", "ref": "kiln.local/kube-apiserver:v1.37.1"},
    {"role": "kube-controller-manager", "ref": "kiln.local/kube-controller-manager:v1.37.1"},
    {"role": "kube-scheduler", "ref": "kiln.local/kube-scheduler:v1.37.1"}, {"role": "kube-proxy", "ref": "kiln.local/kube-proxy:v1.37.1"}],
  "artifacts": [{"path": "pxe/rootfs.squashfs", "sha256": "cb1b", "size": 10}]}`), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"no --image", []string{"-f", siteFile, "--pki", pkiDir}, []string{`"image" not set`}},
		{"an --image with no build", []string{"-f", siteFile, "--pki", pkiDir, "--image", dir, "--dry-run"},
			[]string{"--image " + dir, "not the output of kiln build", filepath.Join(dir, "node.manifest.json")}},
		{"an --image whose manifest is not JSON", []string{"-f", siteFile, "--pki", pkiDir, "--image", notJSON, "--serve", "127.0.0.1:0"},
			[]string{filepath.Join(notJSON, "node.manifest.json"), "not the output of kiln build"}},
		{"an --image missing an artifact", []string{"-f", siteFile, "--pki", pkiDir, "--image", missing, "--dry-run"},
			[]string{"artifacts[0] pxe/rootfs.squashfs", "no such file"}},
		{"no PKI", []string{"-f", siteFile, "--pki", filepath.Join(dir, "none"), "--image", dir, "--url", "http://10.0.0.1:8470"}, []string{"--pki " + filepath.Join(dir, "none")}},
		{"nowhere to fetch the build from", []string{"-f", siteFile, "--pki", pkiDir, "--image", dir}, []string{"give --serve ADDR", "or --url URL"}},
		{"both --serve and --url", []string{"-f", siteFile, "--pki", pkiDir, "--image", dir, "--serve", ":8470", "--url", "http://x"}, []string{"--serve and --url both"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"upgrade"}, tc.args...), &stdout, &stderr)
			if code != exitUsage {
				t.Errorf("exit status %d, want %d\n%s%s", code, exitUsage, stdout.String(), stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
		})
	}
}

// kiln upgrade --help explains the rollout.
func TestUpgradeHelp(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"upgrade", "--help"}, &out, &out); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, w := range []string{"--dry-run", "--serve", "--accept-outage", "rolls back", "quorum", "health gate", "skipped minor"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("help lacks %q", w)
		}
	}
}
