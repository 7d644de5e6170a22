package ignite

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/internal/command"
	"github.com/kiln-project/kiln/internal/mountinfo"
)

// Host is what applying needs from the node besides its files.
type Host interface {
	command.Runner // commands such as useradd
	SetHostname(name string) error
}

// Systemd is the part of systemd's D-Bus API the agent uses.
type Systemd interface {
	Reload(ctx context.Context) error
	Enable(ctx context.Context, units []string) error
	Disable(ctx context.Context, units []string) error
	// Start queues a start job and does not wait for it: units ordered
	// after the agent would otherwise deadlock.
	Start(ctx context.Context, unit string) error
}

// Applier writes a Plan onto a node's root.
type Applier struct {
	Root       string   // "/" on a node
	Persistent []string // paths whose content survives a reboot (the state partition)
	StampDir   string   // where one-time steps record themselves (persistent)
	Host       Host
	Systemd    Systemd // nil: units are written but not reloaded, enabled or started
	Log        func(format string, args ...any)
}

// Check finds conflicts before anything is written: a file or link that
// exists, differs, must not be overwritten, and lives on a path that is
// rebuilt from the image every boot (so it can only be an image file).
func (a *Applier) Check(p *Plan) error {
	var problems []string
	for _, f := range p.Files {
		if f.HasContents && !f.Overwrite && !a.persistent(f.Path) {
			if old, err := os.ReadFile(a.path(f.Path)); err == nil && !bytes.Equal(old, f.Contents) {
				problems = append(problems, fmt.Sprintf("%s exists in the image and overwrite is false", f.Path))
			}
		}
	}
	for _, l := range p.Links {
		if !l.Overwrite && !a.persistent(l.Path) {
			if cur, err := os.Readlink(a.path(l.Path)); err == nil && !l.Hard && cur != l.Target {
				problems = append(problems, fmt.Sprintf("link %s exists (-> %s) and overwrite is false", l.Path, cur))
			}
		}
	}
	problems = append(problems, a.checkDirs(p)...)
	problems = append(problems, a.checkDeletions(p)...)
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// checkDirs finds the directories that cannot be made: a non-directory in
// the way without overwrite (Ignition fails on it), and, with overwrite,
// a path whose removal would reach into the state partition or another
// mount.
func (a *Applier) checkDirs(p *Plan) []string {
	var problems []string
	mounts, _ := mountinfo.Points(a.path(mountinfo.Self))
	for _, d := range p.Dirs {
		if !d.Overwrite {
			if fi, err := os.Stat(a.path(d.Path)); err == nil && !fi.IsDir() {
				problems = append(problems, fmt.Sprintf("%s exists and is not a directory, and overwrite is false", d.Path))
			}
			continue
		}
		for _, m := range append(slices.Clone(a.Persistent), mounts...) {
			if m == d.Path || strings.HasPrefix(m, strings.TrimSuffix(d.Path, "/")+"/") {
				problems = append(problems, fmt.Sprintf("directory %s: overwrite would remove %s, a mount point, and what it holds", d.Path, m))
				break
			}
		}
	}
	return problems
}

// Apply runs the stages in order. It is idempotent: the agent re-applies
// the stored config on every boot.
func (a *Applier) Apply(ctx context.Context, p *Plan) error {
	stages := []struct {
		name string
		run  func(context.Context, *Plan) error
	}{
		{"passwd", a.passwd},
		{"directories", a.dirs},
		{"files", a.files},
		{"links", a.links},
		{"units", a.units},
		{"hostname", a.hostname},
	}
	for _, s := range stages {
		if err := s.run(ctx, p); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

func (a *Applier) path(p string) string { return filepath.Join(a.Root, p) }

func (a *Applier) persistent(p string) bool {
	for _, pp := range a.Persistent {
		if p == pp || strings.HasPrefix(p, pp+"/") {
			return true
		}
	}
	return false
}

func (a *Applier) logf(format string, args ...any) {
	if a.Log != nil {
		a.Log(format, args...)
	}
}

// dirs makes the config's directories shallowest first, as Ignition
// orders them, so that one replaced with overwrite never takes with it
// another the config makes inside it.
func (a *Applier) dirs(ctx context.Context, p *Plan) error {
	dirs := slices.Clone(p.Dirs)
	slices.SortStableFunc(dirs, func(x, y Dir) int { return cmp.Compare(depth(x.Path), depth(y.Path)) })
	for _, d := range dirs {
		if err := a.dir(d); err != nil {
			return fmt.Errorf("%s: %w", d.Path, err)
		}
	}
	return nil
}

func depth(p string) int { return strings.Count(filepath.Clean(p), "/") }

// dir makes one directory: its missing parents 0755, itself with the
// config's mode and owner. An existing directory is kept and given them.
func (a *Applier) dir(d Dir) error {
	full := a.path(d.Path)
	if d.Overwrite {
		if err := a.clear(d.Path); err != nil {
			return err
		}
	}
	if err := mkdirs(filepath.Dir(full)); err != nil {
		return err
	}
	if err := os.Mkdir(full, 0o700); err == nil {
		if err := atomicfile.SyncDir(filepath.Dir(full)); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := a.chown(full, d.Node); err != nil {
		return err
	}
	return os.Chmod(full, d.Mode)
}

// clear removes what is at a directory's path before it is made, as
// Ignition does with overwrite: true. A file or link there is removed on
// every boot. A directory is removed with its contents on every boot when
// the image brings it back, but on a persistent path only once (stamped):
// Ignition's one run, at provisioning, never meets what the node keeps
// there later.
func (a *Applier) clear(path string) error {
	full := a.path(path)
	fi, err := os.Lstat(full)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	persistent := a.persistent(path)
	if persistent && a.stamped("overwrite", path, 0, nil) && (!exists || fi.IsDir()) {
		return nil
	}
	if exists {
		if err := os.RemoveAll(full); err != nil {
			return err
		}
		if err := atomicfile.SyncDir(filepath.Dir(full)); err != nil {
			return err
		}
	}
	if persistent {
		return a.stamp("overwrite", path, 0, nil)
	}
	return nil
}

// mkdirs makes dir and its missing parents, each 0755 whatever the
// umask, as Ignition makes the leading directories of what it writes, and
// syncs each new entry into its parent.
func mkdirs(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirs(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	return atomicfile.SyncDir(parent)
}

func (a *Applier) files(ctx context.Context, p *Plan) error {
	for _, f := range p.Files {
		if err := a.file(f); err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
	}
	return nil
}

func (a *Applier) file(f File) error {
	full := a.path(f.Path)
	old, err := os.ReadFile(full)
	exists := err == nil
	data := f.Contents
	switch {
	case exists && f.HasContents && !f.Overwrite && a.persistent(f.Path):
		data = old // kept across boots: overwrite is false
	case exists && !f.HasContents:
		data = old
	}
	data = append([]byte(nil), data...)
	for i, extra := range f.Append {
		if a.persistent(f.Path) && a.stamped("append", f.Path, i, extra) {
			continue
		}
		data = append(data, extra...)
	}
	owner, err := a.owner(f.Node)
	if err != nil {
		return err
	}
	if err := mkdirs(filepath.Dir(full)); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(full, data, f.Mode, owner); err != nil {
		return err
	}
	if a.persistent(f.Path) {
		for i, extra := range f.Append {
			if err := a.stamp("append", f.Path, i, extra); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *Applier) links(ctx context.Context, p *Plan) error {
	for _, l := range p.Links {
		full := a.path(l.Path)
		if l.Hard {
			if err := a.hardLink(l); err != nil {
				return fmt.Errorf("%s: %w", l.Path, err)
			}
			continue
		}
		if err := mkdirs(filepath.Dir(full)); err != nil {
			return fmt.Errorf("%s: %w", l.Path, err)
		}
		if err := atomicfile.Symlink(l.Target, full); err != nil {
			return err
		}
		if err := a.lchown(full, l.Node); err != nil {
			return fmt.Errorf("%s: %w", l.Path, err)
		}
	}
	return nil
}

// hardLink makes l's missing parent directories, links through a
// temporary name and renames it into place, synced.
func (a *Applier) hardLink(l Link) error {
	full := a.path(l.Path)
	dir := filepath.Dir(full)
	if err := mkdirs(dir); err != nil {
		return err
	}
	tmp := full + ".kiln-link"
	os.Remove(tmp)
	if err := os.Link(a.path(l.Target), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, full); err != nil {
		os.Remove(tmp)
		return err
	}
	return atomicfile.SyncDir(dir)
}

func (a *Applier) hostname(ctx context.Context, p *Plan) error {
	for _, f := range p.Files {
		if f.Path == "/etc/hostname" {
			data, err := os.ReadFile(a.path(f.Path))
			if err != nil {
				return err
			}
			name := strings.TrimSpace(string(data))
			a.logf("hostname %s", name)
			return a.Host.SetHostname(name)
		}
	}
	return nil
}

// One-time steps record a stamp named by what they did, so a re-apply on
// the next boot skips them.
func stampName(kind, path string, i int, data []byte) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%d\x00%s", kind, path, i, data)))
	return kind + "-" + hex.EncodeToString(h[:8])
}

func (a *Applier) stamped(kind, path string, i int, data []byte) bool {
	_, err := os.Stat(filepath.Join(a.path(a.StampDir), stampName(kind, path, i, data)))
	return err == nil
}

func (a *Applier) stamp(kind, path string, i int, data []byte) error {
	return atomicfile.WriteFile(filepath.Join(a.path(a.StampDir), stampName(kind, path, i, data)), []byte(path+"\n"), 0o644, nil)
}
