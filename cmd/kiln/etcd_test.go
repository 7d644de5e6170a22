package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
)

// kiln etcd snapshot refuses, as usage errors (exit 2) and before it
// dials any master, a command line that mixes its two modes or misses a
// flag, and an -o that exists.
func TestEtcdSnapshotRefusals(t *testing.T) {
	const siteFile = "../../examples/site.yaml"
	s, err := site.Load(siteFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st := pki.Store{Dir: filepath.Join(dir, "pki")}
	if _, err := st.Ensure(s); err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(dir, "backup.db")
	os.WriteFile(existing, []byte("the operator's"), 0o600)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{name: "no mode", args: nil, want: "give -f SITE and -o FILE"},
		{name: "no -o", args: []string{"-f", siteFile, "--pki", st.Dir}, want: "give -f SITE and -o FILE"},
		{name: "both modes", args: []string{"--node", "-o", "x.db"}, want: "--node takes a snapshot on this master"},
		{name: "no PKI", args: []string{"-f", siteFile, "--pki", filepath.Join(dir, "none"), "-o", filepath.Join(dir, "new.db")}, want: "not a directory"},
		{name: "-o exists", args: []string{"-f", siteFile, "--pki", st.Dir, "-o", existing}, want: existing + ": etcdsnapshot: the file exists: kiln does not overwrite a file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			code := run(append([]string{"etcd", "snapshot"}, tc.args...), &out, &out)
			if code != exitUsage || !strings.Contains(out.String(), tc.want) {
				t.Errorf("exit %d, said %q; want %d with %q", code, out.String(), exitUsage, tc.want)
			}
		})
	}
	if data, _ := os.ReadFile(existing); string(data) != "the operator's" {
		t.Error("the existing -o was changed")
	}
}
