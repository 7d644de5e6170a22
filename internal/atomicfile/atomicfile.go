// Package atomicfile owns the one way kiln writes a file: to a temp
// file in the same directory, fsync, chmod/chown, rename over the target,
// then fsync the directory. After a power cut the path holds either the
// old content or the new, never a torn mix.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Owner is a numeric uid/gid; nil means "leave as the writing process".
type Owner struct{ UID, GID int }

// WriteFile atomically replaces path with data.
func WriteFile(path string, data []byte, mode os.FileMode, owner *Owner) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".kiln-tmp-")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if owner != nil {
		if err := tmp.Chown(owner.UID, owner.GID); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("writing %s: fsync: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	ok = true
	return SyncDir(dir)
}

// Symlink atomically points path at target.
func Symlink(target, path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+filepath.Base(path)+".kiln-link")
	os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("linking %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("linking %s: %w", path, err)
	}
	return SyncDir(dir)
}

// SyncDir fsyncs a directory so a rename in it is durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// ReplaceDir puts the directory src in dst's place with renames: dst is
// moved to a side name, src renamed to dst, the side copy removed. dst
// holds the old tree or the new one, never a mix of both; if the second
// rename fails the old tree is put back. The old tree is deleted: callers
// decide first that it is theirs to delete (see internal/outdir).
func ReplaceDir(src, dst string) error {
	old := dst + ".kiln-old"
	if err := os.RemoveAll(old); err != nil {
		return err
	}
	if err := os.Rename(dst, old); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("replacing %s: %w", dst, err)
	}
	if err := os.Rename(src, dst); err != nil {
		os.Rename(old, dst)
		return fmt.Errorf("replacing %s: %w", dst, err)
	}
	if err := SyncDir(filepath.Dir(dst)); err != nil {
		return err
	}
	return os.RemoveAll(old)
}
