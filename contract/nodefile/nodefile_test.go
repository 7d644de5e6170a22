package nodefile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name, body, wantErr string
	}{
		{"ok", `{"apiVersion":"kiln.dev/v1alpha1","kind":"Node","name":"m1","role":"genesis","cluster":{"apiServerPort":6443},"masters":[{"name":"m1","address":"10.0.0.2"}]}`, ""},
		{"wrong kind", `{"apiVersion":"kiln.dev/v1alpha1","kind":"Site","name":"m1","role":"genesis"}`, "apiVersion/kind"},
		{"no role", `{"apiVersion":"kiln.dev/v1alpha1","kind":"Node","name":"m1"}`, "name and role are required"},
		{"not json", `{`, "node.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "node.json")
			os.WriteFile(p, []byte(tc.body), 0o644)
			f, err := Read(p)
			if tc.wantErr == "" {
				if err != nil || f.Masters[0].Address != "10.0.0.2" || f.Cluster.APIServerPort != 6443 {
					t.Fatalf("Read: %+v, %v", f, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("got %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}
