package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kiln-project/kiln/builder/imageseed"
	"github.com/kiln-project/kiln/contract/netboot"
	"github.com/kiln-project/kiln/node/catalog"
)

// seedImages bakes every image as a ready-made containerd store
// (imageseed), packed in a squashfs the node mounts, and takes their
// archives out of the image: a node's first boot then runs its pods
// without importing them. kiln's own image holds no kiln (see packKiln),
// so a change to kiln does not make the seed again. The seed squashfs is cached by
// its key (containerd and the images): containerd's metadata records
// the time of the import, so a seed is made once and reused, and a
// rebuild stays byte-identical.
func (b *build) seedImages(ctx context.Context, cat *catalog.Catalog, programs map[string]string) error {
	var seeded []catalog.Image
	for _, im := range cat.Images {
		im.Archive = filepath.Join(b.rootfs, im.Archive)
		seeded = append(seeded, im)
	}
	containerd, err := netboot.DigestFile(programs["containerd"])
	if err != nil {
		return fmt.Errorf("containerd seed: %w", err)
	}
	version := b.spec.Components.Containerd.Version
	key := imageseed.KeyFor(version, containerd.SHA256, seeded)
	cacheDir := filepath.Join(b.opts.CacheDir, "seeds")
	cached := filepath.Join(cacheDir, key+".squashfs")
	how := "cached"
	if _, err := os.Stat(cached); err != nil {
		start := time.Now()
		if err := b.makeSeed(ctx, cacheDir, cached, imageseed.MakeOptions{
			Containerd: programs["containerd"], Ctr: programs["ctr"], ContainerdVersion: version,
			Key: key, Images: seeded, Dir: filepath.Join(b.work, "seed"), Log: b.opts.Progress,
		}); err != nil {
			return err
		}
		how = "made in " + time.Since(start).Round(100*time.Millisecond).String()
	}
	if err := copyFile(cached, filepath.Join(b.rootfs, imageseed.Image), 0o644); err != nil {
		return err
	}
	for i, im := range cat.Images {
		if err := os.Remove(filepath.Join(b.rootfs, im.Archive)); err != nil {
			return fmt.Errorf("containerd seed: %w", err)
		}
		cat.Images[i].Archive = ""
	}
	fmt.Fprintf(b.opts.Progress, "    containerd seed %s: %d images (%s)\n", key[:12], len(seeded), how)
	return nil
}

// makeSeed makes the seed and packs it into the cache, with the spec's
// squashfs compression and epoch, through a temporary name.
func (b *build) makeSeed(ctx context.Context, cacheDir, cached string, o imageseed.MakeOptions) error {
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return err
	}
	make := b.seedMaker
	if make == nil {
		make = imageseed.Make
	}
	if err := make(ctx, o); err != nil {
		return fmt.Errorf("%w (the seed runs the image's containerd on the build host: it needs root and overlayfs under %s)", err, b.work)
	}
	tmp := cached + ".tmp"
	os.Remove(tmp)
	if err := b.mksquashfs(ctx, o.Dir, tmp); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("containerd seed: %w", err)
	}
	return os.Rename(tmp, cached)
}
