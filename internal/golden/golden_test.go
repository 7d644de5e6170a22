package golden

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestFilesRendersEachFileUnderItsPathAndMode(t *testing.T) {
	got := string(Files([]File{
		{Path: "/etc/hostname", Mode: 0o644, Content: []byte("m1\n")},
		{Path: "/etc/kiln/pki/ca.key", Mode: 0o600, Content: []byte("no newline")},
	}))
	want := "### /etc/hostname (0644)\nm1\n### /etc/kiln/pki/ca.key (0600)\nno newline\n"
	if got != want {
		t.Fatalf("Files =\n%s\nwant\n%s", got, want)
	}
}

func TestFirstDifference(t *testing.T) {
	for _, tc := range []struct{ name, got, want, says string }{
		{"changed line", "a\nb\nc\n", "a\nB\nc\n", `line 2 is "b", want "B"`},
		{"missing line", "a\n", "a\nb\n", `line 2 is "", want "b"`},
		{"extra line", "a\nb\nc", "a\nb", `line 3 is "c", want past the end`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FirstDifference([]byte(tc.got), []byte(tc.want)); got != tc.says {
				t.Errorf("FirstDifference = %s, want %s", got, tc.says)
			}
		})
	}
}

// fakeT records a failure instead of failing the real test.
type fakeT struct {
	testing.TB
	errors []string
}

func (f *fakeT) Helper()                   {}
func (f *fakeT) Errorf(s string, a ...any) { f.errors = append(f.errors, s) }

func TestCheckAgainstAFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.golden")
	defer func(was bool) { *update = was }(*update)
	*update = true
	Check(t, p, []byte("one\n"))
	*update = false
	Check(t, p, []byte("one\n"))
	ft := &fakeT{TB: t}
	Check(ft, p, []byte("two\n"))
	if len(ft.errors) != 1 || !strings.Contains(ft.errors[0], "differs") {
		t.Errorf("a different output reported %q", ft.errors)
	}
}
