package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileReplacesAtomicallyWithModeAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "f.conf")
	for _, content := range []string{"first", "second, longer content"} {
		if err := WriteFile(p, []byte(content), 0o600, &Owner{UID: os.Getuid(), GID: os.Getgid()}); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != content {
			t.Fatalf("content = %q, %v; want %q", got, err, content)
		}
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file (no temp left)", len(entries))
	}
}

func TestWriteFileFailureLeavesOldContent(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := WriteFile(p, []byte("old"), 0o644, nil); err != nil {
		t.Fatal(err)
	}
	// An owner this process cannot set makes the write fail before rename
	// (as root, chown to any id succeeds, so use an impossible one).
	err := WriteFile(p, []byte("new"), 0o644, &Owner{UID: -2, GID: -2})
	if err == nil {
		t.Skip("chown to -2 succeeded here")
	}
	got, _ := os.ReadFile(p)
	if string(got) != "old" {
		t.Fatalf("after a failed write content = %q, want old", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temp file left behind: %v", entries)
	}
}

func TestSymlinkReplaces(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "l")
	for _, target := range []string{"/a", "/b"} {
		if err := Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.Readlink(p); got != target {
			t.Fatalf("link -> %q, want %q", got, target)
		}
	}
}

func TestReplaceDirSwapsWholeTrees(t *testing.T) {
	parent := t.TempDir()
	dst, src := filepath.Join(parent, "out"), filepath.Join(parent, "stage")
	for dir, name := range map[string]string{dst: "old", src: "new"} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := ReplaceDir(src, dst); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dst, "new")); err != nil {
		t.Error("the new tree is not in place")
	}
	if _, err := os.Stat(filepath.Join(dst, "old")); err == nil {
		t.Error("the old tree's file survived")
	}
	entries, _ := os.ReadDir(parent)
	if len(entries) != 1 {
		t.Errorf("leftovers: %v", entries)
	}
	// a missing source leaves the destination as it was
	if err := ReplaceDir(src, dst); err == nil {
		t.Error("replacing from a missing source succeeded")
	}
	if _, err := os.Stat(filepath.Join(dst, "new")); err != nil {
		t.Error("a failed replace lost the destination")
	}
}
