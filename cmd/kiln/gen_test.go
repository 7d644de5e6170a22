package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newGenCmd()
	if args[0] == "pki" {
		root = newPKICmd()
	}
	args = args[1:]
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestGenCommand(t *testing.T) {
	dir := t.TempDir()
	pkiDir, out := filepath.Join(dir, "pki"), filepath.Join(dir, "site")
	site := "../../examples/site.yaml"

	got, err := runCmd(t, "gen", "-f", site, "--pki", pkiDir, "-o", out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "issued ca\n") || !strings.Contains(got, "wrote "+filepath.Join(out, "nodes", "w2.ign")) {
		t.Errorf("first run said:\n%s", got)
	}
	got, err = runCmd(t, "gen", "-f", site, "--pki", pkiDir, "-o", out)
	if err != nil || !strings.Contains(got, "nothing missing, nothing issued") {
		t.Errorf("second run: %v\n%s", err, got)
	}

	got, err = runCmd(t, "pki", "check", "--pki", pkiDir)
	if err != nil || !strings.Contains(got, "nodes/m1/apiserver") || !strings.Contains(got, "364d") {
		t.Errorf("pki check: %v\n%s", err, got)
	}

	broken := filepath.Join(dir, "broken.yaml")
	data, _ := os.ReadFile(site)
	os.WriteFile(broken, bytes.Replace(data, []byte("role: worker"), []byte("role: wroker"), 1), 0o644)
	_, err = runCmd(t, "gen", "-f", broken, "--pki", pkiDir, "-o", out)
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), broken+": nodes[3].role: unknown role") {
		t.Errorf("broken site: %v (want a usage error naming the file and nodes[3].role)", err)
	}
	if _, err := os.Stat(filepath.Join(out, "nodes", "w1.ign")); err != nil {
		t.Errorf("a failed run lost the previous output: %v", err)
	}
}
