package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// initramfs finds the image's one kernel and builds its dracut initramfs
// (configured by /etc/dracut.conf.d/kiln.conf) into the work directory,
// beside a copy of the kernel.
func (b *build) initramfs(ctx context.Context) error {
	kver, err := kernelVersion(b.rootfs)
	if err != nil {
		return err
	}
	b.kver = kver
	inImage := "/boot/kiln-initrd.img"
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", b.epochEnv, "LC_ALL=C.UTF-8"}
	err = withChrootMounts(b.rootfs, nil, func() error {
		return b.chroot(ctx, env, "dracut", "--quiet", "--force", "--kver", kver, inImage)
	})
	if err != nil {
		return err
	}
	bootDir := filepath.Join(b.work, "boot")
	if err := os.MkdirAll(bootDir, 0o755); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(b.rootfs, inImage), filepath.Join(bootDir, "initrd.img")); err != nil {
		return fmt.Errorf("moving the initramfs out of the root: %w", err)
	}
	return copyFile(filepath.Join(b.rootfs, "boot", "vmlinuz-"+kver), filepath.Join(bootDir, "vmlinuz"), 0o644)
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

// squashfs packs the root filesystem. SOURCE_DATE_EPOCH makes mksquashfs
// clamp every timestamp to the spec's epoch (it refuses -all-time beside
// it), so the same tree always gives the same bytes.
func (b *build) squashfs(ctx context.Context) error {
	args := []string{b.rootfs, filepath.Join(b.work, "rootfs.squashfs"),
		"-noappend", "-no-progress", "-quiet", "-comp", b.spec.Squashfs.Compression}
	if b.spec.Squashfs.Compression == "zstd" {
		args = append(args, "-Xcompression-level", strconv.Itoa(b.spec.Squashfs.Level))
	}
	return b.run.Run(ctx, Cmd{Name: "mksquashfs", Args: args, Env: []string{b.epochEnv}})
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
