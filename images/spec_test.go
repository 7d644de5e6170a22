package images

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/internal/validation"
)

func TestDefaultSpecIsValid(t *testing.T) {
	s, err := Load("")
	if err != nil {
		t.Fatalf("embedded default spec: %v", err)
	}
	for _, o := range []Output{OutputISO, OutputRaw, OutputPXE} {
		if !s.Wants(o) {
			t.Errorf("default spec does not build %s", o)
		}
	}
	onDisk, err := os.ReadFile("node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if string(onDisk) != string(Default()) {
		t.Error("embedded default differs from images/node.yaml")
	}
}

// A kernel argument with a comma stays one argument when quoted in a YAML
// flow list: the KVM blacklist once written unquoted had its comma split
// it in two, and the kernel passed "kvm_amd" on as an unknown parameter
// while udev went on loading the module.
func TestSpecKernelArgumentWithComma(t *testing.T) {
	spec := strings.Replace(string(Default()), "kernel:\n  package: linux-image-amd64\n",
		"kernel:\n  package: linux-image-amd64\n  cmdline: [\"modprobe.blacklist=kvm_intel,kvm_amd\", transparent_hugepage=madvise]\n", 1)
	if spec == string(Default()) {
		t.Fatal("the default spec's kernel section moved: the test edits nothing")
	}
	s, err := Parse("node.yaml", []byte(spec), ".")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"modprobe.blacklist=kvm_intel,kvm_amd", "transparent_hugepage=madvise"}
	if !slices.Equal(s.Kernel.Cmdline, want) {
		t.Errorf("kernel.cmdline %q, want %q", s.Kernel.Cmdline, want)
	}
}

// Each broken spec is the default with one edit; the test checks that the
// error names the field path and the reason, and that all errors come at once.
func TestInvalidSpecsNameFieldAndReason(t *testing.T) {
	tests := []struct {
		name string
		edit func(string) string
		want []string // "path: reason fragment"
	}{
		{"typo in a key", repl("sourceDateEpoch:", "sourceDateEpock:"),
			[]string{"sourceDateEpock: unknown field", "sourceDateEpoch: must be a positive"}},
		{"wrong version", repl("kiln.dev/v1alpha1", "kiln.dev/v9"), []string{`apiVersion: must be "kiln.dev/v1alpha1"`}},
		{"bad package name", repl("  - conntrack", "  - Conn Track"), []string{`packages[27]: "Conn Track" is not a Debian package name`}},
		{"duplicate package", repl("  - conntrack", "  - runc"), []string{`packages[27]: "runc" is listed twice (also packages[20])`}},
		{"unknown output", repl("[iso, raw, pxe]", "[iso, vhd]"), []string{`outputs[1]: "vhd" is not one of`}},
		{"bad suite and arch together", func(s string) string {
			return strings.NewReplacer("suite: bookworm", "suite: sid", "arch: amd64", "arch: s390x").Replace(s)
		}, []string{`base.suite: "sid" is not supported`, `base.arch: "s390x" is not supported`}},
		{"kernel arguments GRUB would not pass as they are", func(s string) string {
			return strings.Replace(s, "  package: linux-image-amd64\n", "  package: linux-image-amd64\n  cmdline: [quiet, \"a b\", \"x='y'\"]\n", 1)
		}, []string{`kernel.cmdline[1]: must be one argument that GRUB and iPXE pass as it is: "a b" holds whitespace`,
			`kernel.cmdline[2]: must be one argument that GRUB and iPXE pass as it is: "x='y'" holds a single quote`}},
		{"zstd level", repl("level: 9", "level: 40"), []string{"squashfs.level: zstd level must be 1..22"}},
		{"payload without hash", func(s string) string {
			return s + "payload:\n  files:\n    - {path: usr/bin/x, source: ftp://h/x}\n"
		}, []string{
			`payload.files[0].path: "usr/bin/x" must be a clean absolute path`,
			`payload.files[0].source: "ftp://h/x": scheme must be file, http or https`,
			"payload.files[0].sha256: must be 64",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("node.yaml", []byte(tc.edit(string(Default()))), ".")
			var l *validation.List
			if !errors.As(err, &l) {
				t.Fatalf("err = %v, want a validation list", err)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, "node.yaml: "+w) {
					t.Errorf("errors do not contain %q:\n%s", "node.yaml: "+w, msg)
				}
			}
			if len(l.Errors) != len(tc.want) {
				t.Errorf("got %d errors, want %d:\n%s", len(l.Errors), len(tc.want), msg)
			}
		})
	}
}

func TestLoadResolvesSpecDirAndHash(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "img.yaml")
	if err := os.WriteFile(p, Default(), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if s.Dir != dir || len(s.Hash) != 64 {
		t.Fatalf("Dir=%q Hash=%q", s.Dir, s.Hash)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("missing file error = %v, want it to name the file", err)
	}
}

func repl(old, new string) func(string) string {
	return func(s string) string { return strings.Replace(s, old, new, 1) }
}
