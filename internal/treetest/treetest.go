// Package treetest records a directory tree, every entry's type, mode and
// bytes, so that a test can tell a command left it exactly as it was.
package treetest

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Tree maps each path below a root to its type, mode and content (a
// symbolic link's target).
type Tree map[string]string

// Snapshot records the tree at root.
func Snapshot(t testing.TB, root string) Tree {
	t.Helper()
	tree := Tree{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		var content []byte
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			content = []byte(target)
			if err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			if content, err = os.ReadFile(p); err != nil {
				return err
			}
		}
		tree[rel] = fmt.Sprintf("%v %q", fi.Mode(), content)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// Unchanged fails t, naming each path, when the tree at root differs
// from before: an entry gone, added, or with other bytes or mode.
func Unchanged(t testing.TB, root string, before Tree) {
	t.Helper()
	after := Snapshot(t, root)
	for _, p := range slices.Sorted(maps.Keys(before)) {
		if a, ok := after[p]; !ok {
			t.Errorf("%s is gone", filepath.Join(root, p))
		} else if a != before[p] {
			t.Errorf("%s changed", filepath.Join(root, p))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(after)) {
		if _, ok := before[p]; !ok {
			t.Errorf("%s appeared", filepath.Join(root, p))
		}
	}
}
