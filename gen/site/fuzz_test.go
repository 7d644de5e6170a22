package site

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: any site file parses to a site or an error naming the
// file, never a panic; a site that parses has a name for every node.
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile(filepath.Join("..", "..", "examples", "site.yaml")); err == nil {
		f.Add(data)
	}
	f.Add([]byte("apiVersion: kiln.dev/v1alpha1\nkind: Site\ncluster: {name: x}\nnodes: []\n"))
	f.Add([]byte("nodes: [{name: m1, role: genesis, macs: ['52:54:00:00:00:01']}]"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		for i, n := range s.Nodes {
			if n.Name == "" {
				t.Fatalf("nodes[%d] has no name in a site that parsed", i)
			}
		}
	})
}
