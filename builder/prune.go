package builder

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
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
// what prune.keep names under them) and, when kernel modules went, rebuilds
// the module index and checks that no module left behind needs a symbol
// only a pruned module provided.
func (b *build) prune(ctx context.Context) error {
	res, err := pruneTree(b.rootfs, b.spec.Prune)
	if err != nil {
		return err
	}
	fmt.Fprintf(b.opts.Progress, "      pruned %d paths, %.1f MiB\n", res.Paths, float64(res.Bytes)/(1<<20))
	if !res.Modules {
		return nil
	}
	kver, err := kernelVersion(b.rootfs)
	if err != nil {
		return err
	}
	return b.depmod(ctx, kver)
}

// depmod rebuilds modules.dep and friends for the pruned module tree. With
// -e and the kernel's System.map it reports every symbol a remaining module
// needs and nothing provides: a module kept without what it depends on.
func (b *build) depmod(ctx context.Context, kver string) error {
	var out bytes.Buffer
	args := []string{b.rootfs, "sh", "-c", `depmod -a -e -F "/boot/System.map-$1" "$1" 2>&1`, "depmod", kver}
	err := b.run.Run(ctx, Cmd{Name: "chroot", Args: args, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Stdout: &out})
	if err != nil {
		return fmt.Errorf("depmod after pruning kernel modules: %w\n%s", err, out.String())
	}
	if missing := unknownSymbols(out.String()); len(missing) > 0 {
		return fmt.Errorf("pruning kernel modules left modules without what they need (keep the modules that provide these, in prune.keep):\n  %s", strings.Join(missing, "\n  "))
	}
	return nil
}

var unknownSymbol = regexp.MustCompile(`(?m)^depmod: WARNING: (\S+) needs unknown symbol (\S+)$`)

// unknownSymbols lists depmod's "needs unknown symbol" warnings as
// "module: symbol", module paths relative to the module tree.
func unknownSymbols(out string) []string {
	var missing []string
	for _, m := range unknownSymbol.FindAllStringSubmatch(out, -1) {
		mod := m[1]
		if i := strings.Index(mod, "/kernel/"); i >= 0 {
			mod = mod[i+1:]
		}
		missing = append(missing, mod+": "+m[2])
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
