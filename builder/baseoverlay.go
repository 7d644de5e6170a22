package builder

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kiln-project/kiln/internal/mountinfo"
)

// The cached base as a tree. Untarring the 1.2 GB base takes 9-10 s of
// every warm build; the base is extracted once, beside its tar, and each
// build mounts an overlay on it: the build's changes go to an upper
// directory in its work directory, the extracted tree (the lower layer)
// is never written, and the work directory's cleanup unmounts the overlay
// before it removes the upper directory. Where an overlay cannot be
// mounted (not root, no overlay filesystem, a path overlayfs cannot
// name), the build untars as before.

// restoreBase makes b.rootfs the cached base: an overlay on its extracted
// tree, or an untarred copy.
func (b *build) restoreBase(ctx context.Context, cachedTar string) error {
	if b.opts.NoBaseOverlay {
		return b.untar(ctx, cachedTar, b.rootfs)
	}
	tree, err := b.baseTree(ctx, cachedTar)
	if err == nil {
		err = mountOverlay(tree, b.rootfs, filepath.Join(b.work, "upper"), filepath.Join(b.work, "overlay-work"))
	}
	if err != nil {
		fmt.Fprintf(b.opts.Progress, "      no overlay on the cached base (%v): untarring it\n", err)
		mountinfo.UnmountUnder(b.rootfs)
		os.RemoveAll(b.rootfs)
		return b.untar(ctx, cachedTar, b.rootfs)
	}
	fmt.Fprintf(b.opts.Progress, "      overlay on the extracted base %s\n", shortPath(tree))
	return nil
}

// baseTree is the cached base extracted beside its tar (<key>.tree),
// extracted once: into a partial directory, renamed when complete.
func (b *build) baseTree(ctx context.Context, cachedTar string) (string, error) {
	tree := strings.TrimSuffix(cachedTar, ".tar") + ".tree"
	if fi, err := os.Stat(tree); err == nil && fi.IsDir() {
		return tree, nil
	}
	partial := tree + ".partial"
	if err := os.RemoveAll(partial); err != nil {
		return "", fmt.Errorf("removing an interrupted extraction %s: %w", partial, err)
	}
	fmt.Fprintf(b.opts.Progress, "      extracting the cached base once, for overlays: %s\n", shortPath(tree))
	if err := b.untar(ctx, cachedTar, partial); err != nil {
		os.RemoveAll(partial)
		return "", fmt.Errorf("extracting %s: %w", cachedTar, err)
	}
	if err := os.Rename(partial, tree); err != nil {
		os.RemoveAll(partial)
		return "", err
	}
	return tree, nil
}

// mountOverlay mounts an overlay of lower (read only) and upper at
// target, creating upper, work and target.
func mountOverlay(lower, target, upper, work string) error {
	for _, p := range []string{lower, upper, work} {
		if strings.ContainsAny(p, ",:\\") {
			return fmt.Errorf("overlayfs cannot name %q (a comma, colon or backslash)", p)
		}
	}
	for _, d := range []string{target, upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	if err := unix.Mount("overlay", target, "overlay", 0, opts); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("mounting an overlay needs root: %w", err)
		}
		return fmt.Errorf("mounting an overlay on %s: %w", target, err)
	}
	return nil
}
