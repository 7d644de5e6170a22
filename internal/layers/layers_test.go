// Package layers holds the test that keeps kiln's package groups in their
// layers: docs/architecture.md draws the groups, and rules below say what
// each may import. A package of a group may import only the groups listed
// for it (its own included), so the node side never reaches into the
// operator's site schema and nothing low imports anything above it.
package layers

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/kiln-project/kiln/"

// groups maps a path prefix (below the module) to its group; the longest
// prefix wins.
var groups = []struct{ prefix, group string }{
	{"internal/", "internal"},
	{"contract/", "contract"},
	{"firstboot", "node"},
	{"manifests", "node"},
	{"node/", "node"},
	{"gen/", "gen"},
	{"builder", "bake"},
	{"images", "bake"},
	{"ops/", "ops"},
	{"cmd/", "cmd"},
	{"qemu-tests", "tests"},
}

// mayImport lists, for each group, the groups its packages may import.
var mayImport = map[string][]string{
	"internal": {"internal"},
	"contract": {"internal", "contract"},
	"node":     {"internal", "contract", "node"},
	"gen":      {"internal", "contract", "gen"},
	"bake":     {"internal", "contract", "node", "bake"},
	"ops":      {"internal", "contract", "gen", "node", "ops"},
	"cmd":      {"internal", "contract", "node", "gen", "bake", "ops", "cmd"},
	"tests":    {"internal", "contract", "node", "gen", "bake", "ops", "tests"},
}

func groupOf(pkg string) string {
	rel := strings.TrimPrefix(pkg, module)
	best, group := -1, ""
	for _, g := range groups {
		if strings.HasPrefix(rel, g.prefix) && len(g.prefix) > best {
			best, group = len(g.prefix), g.group
		}
	}
	return group
}

type listed struct {
	ImportPath string
	Imports    []string
}

func TestNoImportCrossesALayer(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	seen := 0
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		seen++
		from := groupOf(p.ImportPath)
		if from == "" {
			t.Errorf("%s is in no group: add its place to groups and docs/architecture.md", p.ImportPath)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			to := groupOf(imp)
			if !slices.Contains(mayImport[from], to) {
				t.Errorf("%s (%s) imports %s (%s): %s may import only %v", p.ImportPath, from, imp, to, from, mayImport[from])
			}
		}
	}
	if seen < 40 {
		t.Fatalf("go list found %d packages; want the whole module", seen)
	}
}

func TestGroupOfTakesTheLongestPrefix(t *testing.T) {
	for pkg, want := range map[string]string{
		module + "node/etcdmember":        "node",
		module + "builder/gobuild":        "bake",
		module + "internal/atomicfile":    "internal",
		module + "firstboot/role":         "node",
		module + "qemu-tests/cluster":     "tests",
		module + "contract/nodefile":      "contract",
		"example.com/elsewhere/firstboot": "",
	} {
		if got := groupOf(pkg); got != want {
			t.Errorf("groupOf(%s) = %q, want %q", pkg, got, want)
		}
	}
}
