package nodeconfig

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/ignition"
	"github.com/kiln-project/kiln/internal/outdir"
	"github.com/kiln-project/kiln/internal/treetest"
)

// A second run replaces the first run's output as a whole: a node gone
// from the site loses its config, the marker lists what is there now.
func TestRerunReplacesItsOwnOutput(t *testing.T) {
	s := exampleSite(t)
	st := freshPKI(t, s)
	parent := t.TempDir()
	out := filepath.Join(parent, "site")
	if _, err := Generate(s, st, out); err != nil {
		t.Fatal(err)
	}
	gone := s.Nodes[len(s.Nodes)-1].Name
	s.Nodes = s.Nodes[:len(s.Nodes)-1]
	if _, err := Generate(s, st, out); err != nil {
		t.Fatalf("re-run over its own output: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, NodesDir, gone+".ign")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s.ign of a node no longer in the site survived: %v", gone, err)
	}
	m, ok, err := outdir.ReadMarker(out)
	want := append(nodePaths(s), AdminKubeconfig, SuperAdminKubeconfig)
	slices.Sort(want)
	if !ok || err != nil || m.Kind != MarkerKind || !slices.Equal(m.Paths, want) {
		t.Errorf("marker %+v (ok=%v, %v), want kind %q listing %v", m, ok, err, MarkerKind, want)
	}
	for _, rel := range want {
		if _, err := os.Stat(filepath.Join(out, rel)); err != nil {
			t.Errorf("%s missing after the re-run: %v", rel, err)
		}
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 1 {
		t.Errorf("leftovers beside the output: %v", entries)
	}
}

// The output of a kiln from before the marker (nodes/*.ign and
// admin.kubeconfig only) is recognised and replaced.
func TestOutputWithoutMarkerFromAnOlderKilnIsReplaced(t *testing.T) {
	s := exampleSite(t)
	st := freshPKI(t, s)
	out := filepath.Join(t.TempDir(), "site")
	writeTree(t, out, "nodes/old.ign", AdminKubeconfig)
	if _, err := Generate(s, st, out); err != nil {
		t.Fatalf("older output refused: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, NodesDir, "old.ign")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the older output's nodes/old.ign survived: %v", err)
	}
	if _, ok, _ := outdir.ReadMarker(out); !ok {
		t.Error("no marker written")
	}
}

// What kiln gen did not write, beside or inside what it did, makes it
// refuse, naming the path, before anything is touched: the PKI included.
func TestOutputHoldingWhatGenDidNotWriteIsRefused(t *testing.T) {
	s := exampleSite(t)
	st := freshPKI(t, s)
	os.RemoveAll(filepath.Join(st.Dir, "nodes", "w2")) // a run that goes ahead issues them again
	for _, tc := range []struct {
		name   string
		setup  func(t *testing.T, out string)
		says   string
		suffix string // appended to -o
	}{
		{"a file beside its marked output", func(t *testing.T, out string) {
			generate(t, out)
			writeTree(t, out, "notes.txt")
		}, "holds notes.txt, which kiln gen did not write", ""},
		{"a file in nodes/ of its marked output", func(t *testing.T, out string) {
			generate(t, out)
			writeTree(t, out, "nodes/m1.ign.bak")
		}, "holds nodes/m1.ign.bak", ""},
		{"an older output with another file", func(t *testing.T, out string) {
			writeTree(t, out, "nodes/m1.ign", AdminKubeconfig, "site.yaml")
		}, "holds site.yaml", ""},
		{"an older output with a subdirectory in nodes/", func(t *testing.T, out string) {
			writeTree(t, out, "nodes/m1.ign", "nodes/keep/x.ign")
		}, "holds nodes/keep", ""},
		{"kiln build's output", func(t *testing.T, out string) {
			writeTree(t, out, "node.iso")
			outdir.WriteMarker(out, outdir.Marker{Kind: "kiln build", Paths: []string{"node.iso"}})
		}, `holds the output of "kiln build"`, ""},
		{"a symbolic link to a directory", func(t *testing.T, out string) {
			target := filepath.Join(filepath.Dir(out), "real")
			writeTree(t, target, "nodes/m1.ign")
			os.Symlink(target, out)
		}, "is a symbolic link", ""},
		{"a symbolic link given with a trailing slash", func(t *testing.T, out string) {
			target := filepath.Join(filepath.Dir(out), "real")
			writeTree(t, target, "nodes/m1.ign")
			os.Symlink(target, out)
		}, "is a symbolic link", "/"},
		{"a regular file", func(t *testing.T, out string) {
			writeTree(t, filepath.Dir(out), filepath.Base(out))
		}, "is a file, not a directory", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			out := filepath.Join(parent, "site")
			tc.setup(t, out)
			outside, inPKI := treetest.Snapshot(t, parent), treetest.Snapshot(t, st.Dir)
			_, err := Generate(s, st, out+tc.suffix)
			var r *outdir.Refusal
			if !errors.As(err, &r) || !strings.Contains(err.Error(), out) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v, want a refusal naming %s that %s", err, out, tc.says)

			}
			treetest.Unchanged(t, parent, outside)
			treetest.Unchanged(t, st.Dir, inPKI)
		})
	}
}

// The PKI is checked before it is completed: a refused run issues nothing.
func TestRefusedRunIssuesNothing(t *testing.T) {
	s := exampleSite(t)
	st := freshPKI(t, s)
	os.RemoveAll(filepath.Join(st.Dir, "nodes", "w2"))
	before := treetest.Snapshot(t, st.Dir)
	res, err := Generate(s, st, filepath.Join(st.Dir, "out"))
	var r *outdir.Refusal
	if !errors.As(err, &r) || !strings.Contains(err.Error(), "is inside the PKI directory") {
		t.Fatalf("err = %v, want a refusal of an output inside the PKI", err)
	}
	if len(res.PKI.Issued)+len(res.PKI.Reissued) != 0 {
		t.Errorf("a refused run issued %+v", res.PKI)
	}
	treetest.Unchanged(t, st.Dir, before)
}

func generate(t *testing.T, out string) {
	t.Helper()
	s := exampleSite(t)
	if _, err := Generate(s, freshPKI(t, s), out); err != nil {
		t.Fatal(err)
	}
}

// writeTree creates each file under root with its own path as content.
func writeTree(t *testing.T, root string, files ...string) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A re-run that changes a node's config names the config it replaces,
// by the hash of its bytes (what the node stored), first in the new
// config's fallbackConfigs, keeping nodefile.MaxFallbackConfigs; a
// re-run that changes nothing writes the same bytes.
func TestChangedConfigNamesTheOneItReplaces(t *testing.T) {
	s := exampleSite(t)
	st := freshPKI(t, s)
	out := filepath.Join(t.TempDir(), "site")
	w2 := filepath.Join(out, NodesDir, "w2.ign")
	var hashes []string // of w2's config after each run
	for i, tc := range []struct {
		name string
		edit func(*site.Site)
		want []int // the runs (from 1) whose configs the new one names, newest first
	}{
		{"first run", func(*site.Site) {}, nil},
		{"nothing changed", func(*site.Site) {}, nil},
		{"a new SSH key", func(s *site.Site) {
			s.Cluster.SSHAuthorizedKeys = []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFq3aGvKsWb6oBbGZ6QUQp2F4JqgKkM6gW+wyyUX+Y5N new@site"}
		}, []int{2}},
		{"an NTP server", func(s *site.Site) { s.Cluster.NTPServers = []string{"10.1.1.1"} }, []int{3, 2}},
		{"another NTP server: the oldest drops out", func(s *site.Site) { s.Cluster.NTPServers = []string{"10.1.1.2"} }, []int{4, 3}},
	} {
		tc.edit(s)
		res, err := Generate(s, st, out)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		data, err := os.ReadFile(w2)
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, ignition.Hash(data))
		var want []string
		for _, run := range tc.want {
			want = append(want, hashes[run-1])
		}
		nf := nodeFileOf(t, data)
		if !slices.Equal(nf.FallbackConfigs, want) {
			t.Errorf("%s: fallbackConfigs %q, want %q", tc.name, nf.FallbackConfigs, want)
		}
		replaced := ""
		if want != nil {
			replaced = want[0]
		}
		for _, n := range res.Nodes {
			if n.Path == w2 && (n.Hash != hashes[i] || n.Replaced != replaced) {
				t.Errorf("%s: result %+v, want hash %s replacing %q", tc.name, n, hashes[i], replaced)
			}
		}
		if i > 0 && (want == nil) != (hashes[i] == hashes[i-1]) {
			t.Errorf("%s: the config changed %v, fallbackConfigs %q", tc.name, hashes[i] != hashes[i-1], nf.FallbackConfigs)
		}
	}
}

func nodeFileOf(t *testing.T, data []byte) nodefile.NodeFile {
	t.Helper()
	for _, f := range decode(t, data).Storage.Files {
		if f.Path == NodeFilePath {
			var nf nodefile.NodeFile
			if err := json.Unmarshal(contents(t, f), &nf); err != nil {
				t.Fatal(err)
			}
			return nf
		}
	}
	t.Fatal("no node file")
	return nodefile.NodeFile{}
}
