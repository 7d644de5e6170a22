package builder

import (
	"context"
	"os"
	"path/filepath"
)

// writePXE lays out the network boot set: kernel, initramfs, the root
// squashfs the initramfs fetches (never packed into the initrd), and an
// iPXE script.
func (b *build) writePXE(ctx context.Context) error {
	dir := filepath.Join(b.stage, PXEDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, c := range []struct{ src, dst string }{
		{filepath.Join(b.work, "boot", "vmlinuz"), "vmlinuz"},
		{filepath.Join(b.work, "boot", "initrd.img"), "initrd.img"},
	} {
		if err := copyFile(c.src, filepath.Join(dir, c.dst), 0o644); err != nil {
			return err
		}
	}
	if err := os.Link(filepath.Join(b.work, "rootfs.squashfs"), filepath.Join(dir, "rootfs.squashfs")); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "boot.ipxe"), []byte(ipxeScript(b.spec.Kernel.Cmdline)), 0o644)
}
