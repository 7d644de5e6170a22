package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kiln serve refuses bad input before serving anything, exit status 2,
// naming the file and field.
func TestServeRefusesBadInputWithStatus2(t *testing.T) {
	dir := t.TempDir()
	siteDir, pkiDir := filepath.Join(dir, "site"), filepath.Join(dir, "pki")
	var out bytes.Buffer
	if code := run([]string{"gen", "-f", "../../examples/site.yaml", "--pki", pkiDir, "-o", siteDir}, &out, &out); code != 0 {
		t.Fatalf("kiln gen: %d\n%s", code, out.String())
	}
	dupMAC := filepath.Join(dir, "dup.yaml")
	data, err := os.ReadFile("../../examples/site.yaml")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(dupMAC, []byte(strings.Replace(string(data), "52:54:00:10:00:12", "52:54:00:10:00:11", 1)), 0o644)
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"no build in --image", []string{"-f", "../../examples/site.yaml", "--site", siteDir, "--image", dir, "--pki", pkiDir},
			[]string{filepath.Join(dir, "node.manifest.json"), "not the output of kiln build"}},
		{"two nodes with one MAC", []string{"-f", dupMAC, "--site", siteDir, "--image", dir, "--pki", pkiDir},
			[]string{dupMAC, "nodes[1].macs[0]", "duplicate MAC"}},
		{"a bad --pin", []string{"-f", "../../examples/site.yaml", "--site", siteDir, "--image", dir, "--pin", "w1"},
			[]string{"--pin", "NODE=IMAGE-DIR"}},
		{"no site file", []string{"--site", siteDir}, []string{"file"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"serve"}, c.args...), &stdout, &stderr)
			if code != exitUsage {
				t.Errorf("exit status %d, want %d\n%s%s", code, exitUsage, stdout.String(), stderr.String())
			}
			for _, w := range c.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
			if strings.Contains(stdout.String(), "on http://") {
				t.Errorf("it started serving:\n%s", stdout.String())
			}
		})
	}
}
