package treetest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSnapshotSeesEveryChange(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "d"), 0o755)
	os.WriteFile(filepath.Join(root, "d", "f"), []byte("x"), 0o644)
	os.Symlink("f", filepath.Join(root, "d", "l"))
	before := Snapshot(t, root)
	if len(before) != 3 {
		t.Fatalf("snapshot holds %d entries, want 3: %v", len(before), before)
	}
	for name, change := range map[string]func(){
		"content": func() { os.WriteFile(filepath.Join(root, "d", "f"), []byte("y"), 0o644) },
		"mode":    func() { os.Chmod(filepath.Join(root, "d", "f"), 0o600) },
		"link":    func() { os.Remove(filepath.Join(root, "d", "l")); os.Symlink("g", filepath.Join(root, "d", "l")) },
		"added":   func() { os.WriteFile(filepath.Join(root, "new"), nil, 0o644) },
	} {
		change()
		if after := Snapshot(t, root); len(after) == len(before) && equal(after, before) {
			t.Errorf("a %s change went unseen", name)
		}
		before = Snapshot(t, root)
	}
}

func equal(a, b Tree) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return len(a) == len(b)
}
