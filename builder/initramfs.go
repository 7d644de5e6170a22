package builder

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/klauspost/compress/zstd"

	"github.com/kiln-project/kiln/images"
)

// initramfs finds the image's one kernel and builds its dracut initramfs
// (configured by /etc/dracut.conf.d/kiln.conf) into the work directory,
// beside a copy of the kernel. An initramfs made from the same recipe and
// ingredients (initrdcache.go) is taken from the cache instead.
func (b *build) initramfs(ctx context.Context) error {
	kver, err := kernelVersion(b.rootfs)
	if err != nil {
		return err
	}
	b.kver = kver
	bootDir := filepath.Join(b.work, "boot")
	if err := os.MkdirAll(bootDir, 0o755); err != nil {
		return err
	}
	cache := initrdCache{dir: filepath.Join(b.opts.CacheDir, "initramfs")}
	key, err := initrdRecipe(b.rootfs, kver, b.baseKey, []string{b.epochEnv, dracutConf, nodeFilesDigest()})
	if err != nil {
		return err
	}
	image, why := cache.lookup(key, b.rootfs)
	if image != nil {
		fmt.Fprintf(b.opts.Progress, "      cached initramfs %s\n", key[:12])
	} else {
		fmt.Fprintf(b.opts.Progress, "      dracut (about a minute): %s\n", why)
		if image, err = b.dracut(ctx, kver); err != nil {
			return err
		}
		ing, err := ingredients(b.rootfs, image)
		if err != nil {
			return err
		}
		if err := cache.store(key, image, ing); err != nil {
			return fmt.Errorf("caching the initramfs: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(bootDir, "initrd.img"), image, 0o644); err != nil {
		return err
	}
	return copyFile(filepath.Join(b.rootfs, "boot", "vmlinuz-"+kver), filepath.Join(bootDir, "vmlinuz"), 0o644)
}

// dracut builds the initramfs inside the root filesystem, takes it out
// and compresses it (compressInitramfs).
func (b *build) dracut(ctx context.Context, kver string) ([]byte, error) {
	inImage := "/boot/kiln-initrd.img"
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", b.epochEnv, "LC_ALL=C.UTF-8"}
	err := withChrootMounts(b.rootfs, nil, func() error {
		return b.chroot(ctx, env, "dracut", "--quiet", "--force", "--no-compress", "--kver", kver, inImage)
	})
	if err != nil {
		return nil, err
	}
	p := filepath.Join(b.rootfs, inImage)
	cpio, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("reading the initramfs: %w", err)
	}
	image, err := compressInitramfs(cpio)
	if err != nil {
		return nil, err
	}
	return image, os.Remove(p)
}

// compressInitramfs compresses dracut's cpio archive with zstd, here
// rather than by dracut: the image has no zstd program, and dracut falls
// back to gzip -9 without a word (a larger initramfs, slower to unpack).
// One encoder goroutine and a fixed window (4 MiB, what zstd -15 uses,
// well inside what the kernel's unpacker takes) give the same bytes on
// every build.
func compressInitramfs(cpio []byte) ([]byte, error) {
	var out bytes.Buffer
	zw, err := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedBestCompression),
		zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(4<<20))
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(cpio); err != nil {
		return nil, fmt.Errorf("compressing the initramfs: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("compressing the initramfs: %w", err)
	}
	return out.Bytes(), nil
}

// kernelVersion returns the version of the single kernel installed in rootfs.
func kernelVersion(rootfs string) (string, error) {
	entries, err := os.ReadDir(filepath.Join(rootfs, "lib", "modules"))
	if err != nil {
		return "", fmt.Errorf("looking for the kernel: %w", err)
	}
	var found []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(rootfs, "boot", "vmlinuz-"+e.Name())); err == nil {
			found = append(found, e.Name())
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("want exactly one kernel in the image, found %d: %v", len(found), found)
	}
	return found[0], nil
}

// SquashfsCompression are mksquashfs's compression flags for the spec:
// the build's, and the benchmark floor's beside it.
func SquashfsCompression(s *images.Spec) []string {
	comp := []string{"-comp", s.Squashfs.Compression}
	if s.Squashfs.Compression == "zstd" {
		comp = append(comp, "-Xcompression-level", strconv.Itoa(s.Squashfs.Level))
	}
	return comp
}

// squashfs packs the root filesystem. SOURCE_DATE_EPOCH makes mksquashfs
// clamp every timestamp to the spec's epoch (it refuses -all-time beside
// it), so the same tree always gives the same bytes. The kernel is left
// out: every boot path loads the copy beside the squashfs, and nothing
// on a running node reads /boot.
func (b *build) squashfs(ctx context.Context) error {
	return b.mksquashfs(ctx, b.rootfs, filepath.Join(b.work, "rootfs.squashfs"), "-e", "boot/vmlinuz-"+b.kver)
}

// mksquashfs packs dir into dst with the spec's compression, at the
// spec's epoch; extra go last (mksquashfs wants -e there).
func (b *build) mksquashfs(ctx context.Context, dir, dst string, extra ...string) error {
	args := append([]string{dir, dst, "-noappend", "-no-progress", "-quiet"}, SquashfsCompression(b.spec)...)
	return b.run.Run(ctx, Cmd{Name: "mksquashfs", Args: append(args, extra...), Env: []string{b.epochEnv}})
}

func copyFile(src, dst string, mode os.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, data, mode)
}
