package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.yaml")
	data, err := os.ReadFile("../../examples/site.yaml")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(broken, bytes.Replace(data, []byte("role: worker"), []byte("role: wroker"), 1), 0o644)
	file, operators := filepath.Join(dir, "file"), filepath.Join(dir, "operators")
	os.WriteFile(file, []byte("mine"), 0o644)
	os.MkdirAll(operators, 0o755)
	os.WriteFile(filepath.Join(operators, "node.iso"), []byte("mine"), 0o644)
	brokenPKI := filepath.Join(dir, "broken-pki")
	os.MkdirAll(brokenPKI, 0o700)
	os.WriteFile(filepath.Join(brokenPKI, "sa.key"), []byte("garbage"), 0o600)
	for _, tc := range []struct {
		name       string
		args       []string
		want       int
		wantStderr string // "" : nothing on stderr
	}{
		{"help", []string{"--help"}, exitOK, ""},
		{"unknown command", []string{"bake"}, exitUsage, "unknown command"},
		{"unknown flag", []string{"gen", "--frobnicate"}, exitUsage, "unknown flag"},
		{"missing required flag", []string{"gen"}, exitUsage, `"file" not set`},
		{"extra argument", []string{"check", "dns"}, exitUsage, "accepts 1 arg"},
		{"site file missing", []string{"gen", "-f", filepath.Join(dir, "none.yaml"), "--pki", dir, "-o", dir}, exitUsage, "none.yaml"},
		{"site file invalid", []string{"gen", "-f", broken, "--pki", dir, "-o", dir}, exitUsage, "nodes[3].role"},
		{"spec file missing", []string{"build", "-f", filepath.Join(dir, "none.yaml")}, exitUsage, "none.yaml"},
		{"gen output a regular file", []string{"gen", "-f", "../../examples/site.yaml", "--pki", filepath.Join(dir, "pki"), "-o", file}, exitUsage, file + ": it is a file"},
		{"build output a regular file", []string{"build", "-o", file, "--cache", file}, exitUsage, file + ": it is a file"},
		{"build over an operator's node.iso", []string{"build", "-o", operators, "--cache", file}, exitUsage, filepath.Join(operators, "node.iso") + ": it is there and kiln did not write it"},
		{"bad flag value in RunE", []string{"pki", "check", "--pki", dir, "--warn", "soon"}, exitUsage, "--warn"},
		{"gen with a PKI only the operator can fix", []string{"gen", "-f", "../../examples/site.yaml", "--pki", brokenPKI, "-o", filepath.Join(dir, "out")}, exitUsage, filepath.Join(brokenPKI, "sa.key") + ": not a PEM private key"},
		{"pki check finds a problem", []string{"pki", "check", "--pki", brokenPKI}, exitFailure, filepath.Join(brokenPKI, "sa.pub") + ": missing"},
		{"pki check of no PKI", []string{"pki", "check", "--pki", operators}, exitUsage, "no PKI here"},
		{"node remove without a name", []string{"node", "remove", "-f", "../../examples/site.yaml"}, exitUsage, "accepts 1 arg"},
		{"node remove with no PKI", []string{"node", "remove", "w1", "-f", "../../examples/site.yaml", "--pki", filepath.Join(dir, "none")}, exitUsage, "--pki " + filepath.Join(dir, "none")},
		{"node remove with no timeout", []string{"node", "remove", "w1", "-f", "../../examples/site.yaml", "--timeout", "0s"}, exitUsage, "--timeout 0s"},
		{"node list without a site", []string{"node", "list"}, exitUsage, `"file" not set`},
		{"node list of an invalid site", []string{"node", "list", "-f", broken, "--pki", dir}, exitUsage, "nodes[3].role"},
		{"runtime failure", []string{"images", "import", "--root", dir}, exitFailure, "image catalog"},
		{"agent failure already on the console", []string{"firstboot", "role", "--root", dir}, exitFailure, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			got := run(tc.args, &stdout, &stderr)
			if got != tc.want {
				t.Errorf("exit code %d, want %d (stderr %q)", got, tc.want, stderr.String())
			}
			if tc.wantStderr == "" && stderr.Len() > 0 {
				t.Errorf("stderr %q, want nothing", stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("stderr %q does not mention %q", stderr.String(), tc.wantStderr)
			}
		})
	}
}

func TestAgentFailurePrintsItsOwnFinalLine(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if got := run([]string{"firstboot", "role", "--root", t.TempDir()}, &stdout, &stderr); got != exitFailure {
		t.Fatalf("exit code %d, want %d", got, exitFailure)
	}
	if !strings.Contains(stdout.String(), "kiln-firstboot: error: ") {
		t.Errorf("stdout lacks the agent's final error line:\n%s", stdout.String())
	}
}
