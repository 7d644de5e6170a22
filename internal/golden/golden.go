// Package golden compares a test's output with a committed file under
// testdata/; `go test ./pkg -update` rewrites the files, and the diff is
// reviewed like code.
package golden

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ with what the tests render")

// Updating reports whether the run rewrites golden files (-update).
func Updating() bool { return *update }

// Check fails t when got differs from the golden file at path, naming
// the first line that differs. With -update it writes got there first.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs: %s (go test -update, then review the diff)", path, FirstDifference(got, want))
	}
}

// FirstDifference describes the first line where got and want differ.
func FirstDifference(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		gl, wl := line(g, i), line(w, i)
		if gl != wl {
			return fmt.Sprintf("line %d is %s, want %s", i+1, gl, wl)
		}
	}
	return "the same lines"
}

func line(lines []string, i int) string {
	if i >= len(lines) {
		return "past the end"
	}
	return fmt.Sprintf("%.200q", lines[i])
}

// File is one file of a rendered file set.
type File struct {
	Path    string
	Mode    os.FileMode
	Content []byte
}

// Files renders a file set as one reviewable document: for each file a
// "### path (mode)" line, then its content, ending in a newline.
func Files(files []File) []byte {
	var b bytes.Buffer
	for _, f := range files {
		fmt.Fprintf(&b, "### %s (%04o)\n", f.Path, f.Mode.Perm())
		b.Write(f.Content)
		if len(f.Content) > 0 && !bytes.HasSuffix(f.Content, []byte("\n")) {
			b.WriteString("\n")
		}
	}
	return b.Bytes()
}
