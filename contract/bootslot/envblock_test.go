package bootslot

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// block is header, body and '#' padding up to BlockSize.
func block(body string) []byte {
	b := []byte(header + body)
	return append(b, bytes.Repeat([]byte{'#'}, BlockSize-len(b))...)
}

func TestParseBlock(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want Env
	}{
		{"empty", block(""), nil},
		{"variables in order", block("b=2\na=1\n"), Env{{"b", "2"}, {"a", "1"}}},
		{"empty value", block("a=\n"), Env{{"a", ""}}},
		{"value holding '='", block("a=x=y\n"), Env{{"a", "x=y"}}},
		{"escaped backslash and newline", block("a=c:\\\\d\\\ne\n"), Env{{"a", "c:\\d\ne"}}},
		{"other escaped byte", block("a=\\x\n"), Env{{"a", "x"}}},
		{"comment lines", block("# WARNING: edit with grub-editenv\na=1\n#x=2\n"), Env{{"a", "1"}}},
		{"padding between variables", block("a=1\n#####\nb=2\n"), Env{{"a", "1"}, {"b", "2"}}},
		{"no padding", block(strings.Repeat("x", BlockSize-len(header)-3) + "=\n"),
			Env{{strings.Repeat("x", BlockSize-len(header)-3), ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseBlock(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseBlockRefusesMalformed(t *testing.T) {
	long := append(block("a=1\n"), '#')
	tooLate := block("")
	copy(tooLate[BlockSize-4:], "a=1\\")
	noNewline := block("")
	copy(noNewline[BlockSize-3:], "a=1")
	tests := []struct {
		name, in, want string
	}{
		{"short", string(block("")[:BlockSize-1]), "1023 bytes, want 1024"},
		{"oversized", string(long), "1025 bytes, want 1024"},
		{"no header", strings.Replace(string(block("a=1\n")), "GRUB", "Grub", 1), `no "# GRUB Environment Block" header`},
		{"line without =", string(block("a\n")), "a line with no '='"},
		{"empty name", string(block("=1\n")), "an empty variable name"},
		{"name with newline", string(block("a\nb=1\n")), `variable name "a\nb"`},
		{"set twice", string(block("a=1\na=2\n")), `variable "a" set twice`},
		{"NUL in value", string(block("a=1\x002\n")), "a NUL byte"},
		{"value past the end", string(block("a=1\\\n")), "runs past the end"},
		{"backslash at the end", string(tooLate), "does not end in a newline"},
		{"no final newline", string(noNewline), "does not end in a newline and '#' padding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseBlock([]byte(tt.in))
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an ErrMalformed saying %q", err, tt.want)
			}
		})
	}
}

func TestRenderBlock(t *testing.T) {
	env := Env{{"b", "2"}, {"a", "c:\\d\ne"}, {"empty", ""}}
	got, err := RenderBlock(env)
	if err != nil {
		t.Fatal(err)
	}
	if want := block("b=2\na=c:\\\\d\\\ne\nempty=\n"); !bytes.Equal(got, want) {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
	back, err := ParseBlock(got)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, env) {
		t.Errorf("read back %q, want %q", back, env)
	}
}

func TestRenderBlockRefuses(t *testing.T) {
	full := BlockSize - len(header) - len("a=\n")
	tests := []struct {
		name string
		env  Env
		want string
	}{
		{"empty name", Env{{"", "1"}}, "an empty variable name"},
		{"comment name", Env{{"#a", "1"}}, "starts with '#'"},
		{"name with =", Env{{"a=b", "1"}}, "holds '='"},
		{"name with newline", Env{{"a\nb", "1"}}, "a newline"},
		{"set twice", Env{{"a", "1"}, {"a", "2"}}, `"a" set twice`},
		{"NUL in value", Env{{"a", "x\x00"}}, "a NUL byte"},
		{"oversized", Env{{"a", strings.Repeat("x", full+1)}}, "1025 bytes, more than the 1024-byte"},
		{"oversized by escapes", Env{{"a", strings.Repeat("\\", full/2+1)}}, "more than the 1024-byte"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := RenderBlock(tt.env)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error saying %q", err, tt.want)
			}
		})
	}
	if _, err := RenderBlock(Env{{"a", strings.Repeat("x", full)}}); err != nil {
		t.Errorf("a block filled to the last byte: %v", err)
	}
}

// hostTool returns the path of a host program a test runs. Without it
// the test is skipped, or fails under CI, where a skip would hide a
// missing host package.
func hostTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	switch {
	case err != nil && os.Getenv("CI") != "":
		t.Fatalf("%s: %v: scripts/host-deps.sh installs it", name, err)
	case err != nil:
		t.Skipf("%s: %v: run scripts/host-deps.sh to run this test", name, err)
	}
	return p
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// tricky values: GRUB escapes the backslash and the newline, and '=' and
// '#' inside a value need no escape.
var tricky = Env{
	{"kiln_active", "a"},
	{"path", `C:\kiln\a`},
	{"two_lines", "one\ntwo"},
	{"equals", "x=y=z"},
	{"hash", "#not a comment"},
	{"empty", ""},
	{"trailing_backslash", `end\`},
}

func TestBlockAgreesWithGrubEditenv(t *testing.T) {
	editenv := hostTool(t, "grub-editenv")
	t.Run("grub-editenv writes, the codec reads", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "grubenv")
		run(t, editenv, file, "create")
		for _, v := range tricky {
			run(t, editenv, file, "set", v.Name+"="+v.Value)
		}
		run(t, editenv, file, "set", "removed=soon")
		run(t, editenv, file, "unset", "removed")
		got, err := ParseBlock(readFile(t, file))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tricky) {
			t.Errorf("got %q, want %q", got, tricky)
		}
	})
	t.Run("the codec writes, grub-editenv reads and sets", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "grubenv")
		b, err := RenderBlock(tricky)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, file, b)
		var want strings.Builder
		for _, v := range tricky {
			want.WriteString(v.Name + "=" + v.Value + "\n")
		}
		if got := run(t, editenv, file, "list"); got != want.String() {
			t.Errorf("grub-editenv list:\n%s\nwant\n%s", got, want.String())
		}
		run(t, editenv, file, "set", "kiln_active=b")
		after := readFile(t, file)
		if diff := differingBytes(b, after); diff != 1 {
			t.Errorf("grub-editenv's set of a value of the same length changed %d bytes, want 1", diff)
		}
		got, err := ParseBlock(after)
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := got.Get("kiln_active"); v != "b" {
			t.Errorf("kiln_active = %q after grub-editenv set it to b", v)
		}
	})
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func differingBytes(a, b []byte) int {
	n := max(len(a), len(b)) - min(len(a), len(b))
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}
