package builder

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kiln-project/kiln/images"
)

// pruneResult is what the prune step removed.
type pruneResult struct {
	Paths   int   // top-level removals
	Bytes   int64 // regular file bytes removed
	Modules bool  // something under /usr/lib/modules went
}

// prune removes the spec's prune paths from the root filesystem (keeping
// what prune.keep names under them). When kernel modules went, it checks
// that no module left behind depends on a pruned one (by the module
// index the kernel package shipped) and rebuilds that index.
func (b *build) prune(ctx context.Context) error {
	kver, err := kernelVersion(b.rootfs)
	if err != nil {
		return err
	}
	modDir := filepath.Join(b.rootfs, "usr/lib/modules", kver)
	deps, err := os.ReadFile(filepath.Join(modDir, "modules.dep"))
	if err != nil {
		return fmt.Errorf("reading the kernel's module index: %w", err)
	}
	res, err := pruneTree(b.rootfs, b.spec.Prune)
	if err != nil {
		return err
	}
	fmt.Fprintf(b.opts.Progress, "      pruned %d paths, %.1f MiB\n", res.Paths, float64(res.Bytes)/(1<<20))
	if !res.Modules {
		return nil
	}
	if missing := missingDeps(modDir, deps); len(missing) > 0 {
		return fmt.Errorf("prune: kept kernel modules need pruned ones (add these to prune.keep, or prune the modules that need them):\n  %s", strings.Join(missing, "\n  "))
	}
	return b.chroot(ctx, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, "depmod", "-a", kver)
}

// missingDeps reads a modules.dep ("mod.ko: dep.ko dep2.ko" per line) and
// lists, for every module still in modDir, each dependency that is not.
func missingDeps(modDir string, modulesDep []byte) []string {
	exists := func(rel string) bool { _, err := os.Lstat(filepath.Join(modDir, rel)); return err == nil }
	var missing []string
	for _, line := range strings.Split(string(modulesDep), "\n") {
		mod, deps, ok := strings.Cut(line, ":")
		if !ok || !exists(mod) {
			continue
		}
		for _, d := range strings.Fields(deps) {
			if !exists(d) {
				missing = append(missing, mod+" needs "+d)
			}
		}
	}
	return missing
}

// pruneTree removes every path matching p.Paths under root, except paths
// matching p.Keep (and the directories leading to them).
func pruneTree(root string, p images.Prune) (pruneResult, error) {
	var res pruneResult
	for _, glob := range p.Paths {
		matches, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			return res, fmt.Errorf("prune path %s: %w", glob, err)
		}
		for _, m := range matches {
			rel := "/" + strings.TrimPrefix(strings.TrimPrefix(m, root), "/")
			n, err := removeExcept(m, rel, p.Keep)
			if err != nil {
				return res, fmt.Errorf("pruning %s: %w", rel, err)
			}
			res.Paths++
			res.Bytes += n
			if strings.HasPrefix(rel, "/usr/lib/modules/") || strings.HasPrefix(rel, "/lib/modules/") {
				res.Modules = true
			}
		}
	}
	return res, nil
}

// removeExcept removes path (rel inside the image) unless a keep glob
// matches it; a directory that a keep glob reaches into is walked instead,
// its other entries removed. It returns the regular file bytes removed.
func removeExcept(path, rel string, keep []string) (int64, error) {
	if slices.ContainsFunc(keep, func(k string) bool { ok, _ := filepath.Match(k, rel); return ok }) {
		return 0, nil
	}
	info, err := os.Lstat(path)
	if err != nil {
		return 0, err
	}
	reaches := slices.ContainsFunc(keep, func(k string) bool { return reachesInto(k, rel) })
	if !info.IsDir() || !reaches {
		n, err := treeBytes(path)
		if err != nil {
			return 0, err
		}
		return n, os.RemoveAll(path)
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, e := range entries {
		n, err := removeExcept(filepath.Join(path, e.Name()), rel+"/"+e.Name(), keep)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// reachesInto reports whether glob can match something strictly under the
// directory rel: rel's components match the glob's leading ones.
func reachesInto(glob, rel string) bool {
	g, r := strings.Split(glob, "/"), strings.Split(rel, "/")
	if len(g) <= len(r) {
		return false
	}
	for i, name := range r {
		if ok, _ := filepath.Match(g[i], name); !ok {
			return false
		}
	}
	return true
}

func treeBytes(path string) (int64, error) {
	var n int64
	err := filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	return n, err
}
