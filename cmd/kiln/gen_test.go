package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/ignition"
	"github.com/kiln-project/kiln/internal/outdir"
	"github.com/kiln-project/kiln/internal/treetest"
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
	if _, err := os.Stat(filepath.Join(out, outdir.MarkerName)); err != nil {
		t.Errorf("no marker in the output: %v", err)
	}
	w2, _ := os.ReadFile(filepath.Join(out, "nodes", "w2.ign"))
	if want := "wrote " + filepath.Join(out, "nodes", "w2.ign") + " kiln.config.hash=" + ignition.Hash(w2) + "\n"; !strings.Contains(got, want) {
		t.Errorf("first run does not print w2's hash (%s):\n%s", want, got)
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

// An -o whose replacement would destroy the operator's files is a usage
// error naming the path, and every file under the working tree (the PKI
// and the site file included) is as it was.
func TestGenRefusesAnOutputItDidNotWrite(t *testing.T) {
	template := t.TempDir()
	s, err := site.Load("../../examples/site.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (pki.Store{Dir: template}).Ensure(s); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		out   string // under the working tree
		chdir string // under the working tree
		named string // the path the error names, under the working tree
		says  string
	}{
		{"a regular file", "file.txt", "", "file.txt", "is a file, not a directory"},
		{"the PKI directory", "secrets/pki", "", "secrets/pki", "is the PKI directory"},
		{"the PKI's parent", "secrets", "", "secrets/pki", "holds the PKI directory"},
		{"inside the PKI", "secrets/pki/out", "", "secrets/pki/out", "is inside the PKI directory"},
		{"inside the PKI through a link", "pki-link/out", "", "secrets/pki", "is inside the PKI directory"},
		{"the current directory", ".", "work", "work", "is the current directory"},
		{"the parent of the current directory", "..", "work/deeper", "work/deeper", "holds the current directory"},
		{"the directory holding the site file", "site", "", "site/site.yaml", "holds the site file"},
		{"the site file", "site/site.yaml", "", "site/site.yaml", "is the site file"},
		{"a directory with other files", "notes", "", "notes", "holds todo.txt, which kiln gen did not write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if err := os.CopyFS(filepath.Join(root, "secrets", "pki"), os.DirFS(template)); err != nil {
				t.Fatal(err)
			}
			siteData, _ := os.ReadFile("../../examples/site.yaml")
			for p, data := range map[string][]byte{"site/site.yaml": siteData, "file.txt": []byte("mine"),
				"notes/todo.txt": []byte("todo"), "work/draft.txt": []byte("draft"), "work/deeper/draft.txt": []byte("draft")} {
				os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
				os.WriteFile(filepath.Join(root, p), data, 0o644)
			}
			os.Symlink("secrets/pki", filepath.Join(root, "pki-link"))
			out := filepath.Join(root, tc.out)
			if tc.chdir != "" {
				t.Chdir(filepath.Join(root, tc.chdir))
				out = tc.out
			}
			before := treetest.Snapshot(t, root)
			var stdout, stderr bytes.Buffer
			code := run([]string{"gen", "-f", filepath.Join(root, "site/site.yaml"), "--pki", filepath.Join(root, "secrets/pki"), "-o", out}, &stdout, &stderr)
			if code != exitUsage {
				t.Errorf("exit code %d, want %d (stderr %q)", code, exitUsage, stderr.String())
			}
			if named := filepath.Join(root, tc.named); !strings.Contains(stderr.String(), named) || !strings.Contains(stderr.String(), tc.says) {
				t.Errorf("stderr %q does not name %s or say %q", stderr.String(), named, tc.says)
			}
			treetest.Unchanged(t, root, before)
		})
	}
}

// A second kiln gen after the site changed re-issues what drifted, says
// which field and where the old pair went, and keeps the old pair.
func TestGenReissuesWhatDrifted(t *testing.T) {
	dir := t.TempDir()
	pkiDir, out, moved := filepath.Join(dir, "pki"), filepath.Join(dir, "site"), filepath.Join(dir, "moved.yaml")
	data, err := os.ReadFile("../../examples/site.yaml")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(moved, bytes.Replace(data, []byte("192.168.10.13/24"), []byte("192.168.10.14/24"), 1), 0o644)
	if _, err := runCmd(t, "gen", "-f", "../../examples/site.yaml", "--pki", pkiDir, "-o", out); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(filepath.Join(pkiDir, "nodes/m3/etcd-peer.crt"))

	got, err := runCmd(t, "gen", "-f", moved, "--pki", pkiDir, "-o", out)
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(got, "\n") {
		if strings.HasPrefix(l, "reissued nodes/m3/etcd-peer: ") {
			line = l
		}
	}
	if !strings.Contains(line, "has 192.168.10.13, which the site no longer names; lacks 192.168.10.14") {
		t.Fatalf("no line names the drift of nodes/m3/etcd-peer:\n%s", got)
	}
	backups, _ := filepath.Glob(filepath.Join(pkiDir, "backup", "*", "nodes", "m3", "etcd-peer.crt"))
	if len(backups) != 1 || !strings.Contains(line, filepath.Dir(filepath.Dir(filepath.Dir(backups[0])))) {
		t.Fatalf("backups %v, line %q", backups, line)
	}
	if b, _ := os.ReadFile(backups[0]); !bytes.Equal(b, old) {
		t.Error("the backup is not the old certificate")
	}
	if got, err := runCmd(t, "pki", "check", "--pki", pkiDir, "--site", moved); err != nil {
		t.Errorf("pki check after the re-issue: %v\n%s", err, got)
	}
}

// kiln pki check reports every problem at once, a line each naming the
// file, and exits 1.
func TestPKICheckReportsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	pkiDir := filepath.Join(dir, "pki")
	if _, err := runCmd(t, "gen", "-f", "../../examples/site.yaml", "--pki", pkiDir, "-o", filepath.Join(dir, "site")); err != nil {
		t.Fatal(err)
	}
	renamed := filepath.Join(dir, "renamed.yaml")
	data, _ := os.ReadFile("../../examples/site.yaml")
	os.WriteFile(renamed, bytes.Replace(data, []byte("kube-apiserver.kiln.internal"), []byte("api.lab.example"), 1), 0o644)
	in := func(rel string) string { return filepath.Join(pkiDir, filepath.FromSlash(rel)) }
	os.WriteFile(in("sa.key"), []byte("garbage"), 0o600)
	os.Remove(in("nodes/w1/kubelet-server.key"))
	w2key, _ := os.ReadFile(in("nodes/w2/kubelet-client.key"))
	os.WriteFile(in("nodes/w1/kubelet-client.key"), w2key, 0o600)
	os.RemoveAll(in("etcd"))
	os.WriteFile(in("etcd"), []byte("not a directory"), 0o600)

	var stdout, stderr bytes.Buffer
	code := run([]string{"pki", "check", "--pki", pkiDir, "--site", renamed}, &stdout, &stderr)
	if code != exitFailure {
		t.Errorf("exit code %d, want %d", code, exitFailure)
	}
	var lines []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.HasPrefix(l, "  ") {
			lines = append(lines, l)
		}
	}
	wants := []string{
		in("sa.key") + ": not a PEM private key",
		in("nodes/w1/kubelet-server.key") + ": missing",
		in("nodes/w1/kubelet-client.key") + ": does not belong to",
		in("etcd") + ": a file where a directory is expected",
		in("nodes/m1/apiserver.crt") + ": SANs drifted",
		in("nodes/m2/apiserver.crt") + ": SANs drifted",
		in("nodes/m3/apiserver.crt") + ": SANs drifted",
	}
	if len(lines) != len(wants) {
		t.Errorf("%d problem lines, want %d:\n%s", len(lines), len(wants), stderr.String())
	}
	for _, w := range wants {
		n := 0
		for _, l := range lines {
			if strings.HasPrefix(l, "  "+w) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d lines start with %q, want 1:\n%s", n, w, stderr.String())
		}
	}
}
