package builder

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kiln-project/kiln/images"
)

// bootstrapPackages go in with debootstrap; everything else is installed
// with apt inside the chroot, whose resolver handles alternatives such as
// dracut versus initramfs-tools that debootstrap's does not.
var bootstrapPackages = []string{"systemd", "systemd-sysv", "udev", "dbus", "kmod", "iproute2"}

// baseRootfs restores the root filesystem for the spec's Debian release and
// package list from the cache, or creates it and stores it there.
func (b *build) baseRootfs(ctx context.Context) error {
	key, err := rootfsKey(ctx, b.run, b.spec)
	if err != nil {
		return err
	}
	b.baseKey = key
	cached := filepath.Join(b.opts.CacheDir, "rootfs", key+".tar")
	if _, err := os.Stat(cached); err == nil {
		fmt.Fprintf(b.opts.Progress, "      cached base %s\n", shortPath(cached))
		return b.restoreBase(ctx, cached)
	}
	fmt.Fprintf(b.opts.Progress, "      no cached base for key %s: debootstrap + apt (a few minutes)\n", key[:12])
	if err := b.debootstrap(ctx); err != nil {
		return err
	}
	if err := b.aptInstall(ctx); err != nil {
		return err
	}
	return b.storeTar(ctx, cached)
}

// rootfsKey hashes everything that decides the base root filesystem's
// content: release, mirror, architecture, packages, the debootstrap
// version and the files in place while apt installs (the dracut
// configuration the kernel's postinst runs with among them).
func rootfsKey(ctx context.Context, run Runner, s *images.Spec) (string, error) {
	var version bytes.Buffer
	err := run.Run(ctx, Cmd{Name: "dpkg-query", Args: []string{"-W", "-f=${Version}", "debootstrap"}, Stdout: &version})
	if err != nil {
		return "", fmt.Errorf("debootstrap is not installed (run scripts/host-deps.sh): %w", err)
	}
	out := version.String()
	pkgs := append([]string(nil), s.Packages...)
	sort.Strings(pkgs)
	h := sha256.New()
	fmt.Fprintf(h, "v1\n%s\n%s\n%s\n%s\n%s\n", s.Base.Suite, s.Base.Mirror, s.Base.Arch, out, strings.Join(pkgs, ","))
	fmt.Fprintf(h, "%s\n", strings.Join(bootstrapPackages, ","))
	for _, f := range aptFiles(s) {
		fmt.Fprintf(h, "%s %o %d\n%s", f.path, f.mode, len(f.data), f.data)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (b *build) debootstrap(ctx context.Context) error {
	debs := filepath.Join(b.opts.CacheDir, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return err
	}
	return b.run.Run(ctx, Cmd{Name: "debootstrap", Args: []string{
		"--variant=minbase", "--arch=" + b.spec.Base.Arch,
		"--include=" + strings.Join(bootstrapPackages, ","),
		"--cache-dir=" + debs,
		b.spec.Base.Suite, b.rootfs, b.spec.Base.Mirror,
	}})
}

// aptInstall installs the spec's packages in the chroot with no
// recommends, no docs, and no service started, then cleans apt's state.
func (b *build) aptInstall(ctx context.Context) error {
	if err := writeFiles(b.rootfs, aptFiles(b.spec)); err != nil {
		return err
	}
	archives := filepath.Join(b.opts.CacheDir, "apt-archives")
	if err := os.MkdirAll(archives, 0o755); err != nil {
		return err
	}
	env := []string{"DEBIAN_FRONTEND=noninteractive", "LC_ALL=C.UTF-8", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	binds := []bind{{archives, "var/cache/apt/archives", ""}}
	return withChrootMounts(b.rootfs, binds, func() error {
		if err := b.chroot(ctx, env, "apt-get", "update", "-q"); err != nil {
			return err
		}
		args := append([]string{"install", "-y", "-q", "--no-install-recommends"}, b.spec.Packages...)
		if err := b.chroot(ctx, env, "apt-get", args...); err != nil {
			return err
		}
		return b.chroot(ctx, env, "apt-get", "clean")
	})
}

func (b *build) chroot(ctx context.Context, env []string, name string, args ...string) error {
	return b.run.Run(ctx, Cmd{Name: "chroot", Args: append([]string{b.rootfs, name}, args...), Env: env})
}

func aptSources(s *images.Spec) string {
	m := strings.TrimSuffix(s.Base.Mirror, "/")
	security := strings.TrimSuffix(m, "/debian") + "/debian-security"
	return fmt.Sprintf("deb %[1]s %[2]s main\ndeb %[1]s %[2]s-updates main\ndeb %[3]s %[2]s-security main\n", m, s.Base.Suite, security)
}

// aptFiles keep the image small and the chroot quiet: no docs, man pages
// or locales, and no service started while packages install.
func aptFiles(s *images.Spec) []file {
	return append([]file{
		{path: "/etc/apt/sources.list", data: aptSources(s), mode: 0o644},
		{path: "/usr/sbin/policy-rc.d", data: "#!/bin/sh\n# kiln: no service starts inside the build chroot\nexit 101\n", mode: 0o755},
		{path: "/etc/dpkg/dpkg.cfg.d/kiln-nodoc", mode: 0o644, data: "path-exclude=/usr/share/doc/*\npath-include=/usr/share/doc/*/copyright\n" +
			"path-exclude=/usr/share/man/*\npath-exclude=/usr/share/info/*\npath-exclude=/usr/share/locale/*\npath-include=/usr/share/locale/locale.alias\n"},
	}, dracutFiles()...) // in place before the kernel's postinst runs dracut, so that run is cheap and succeeds
}

// storeTar saves the freshly built base into the cache under its key,
// atomically, so an interrupted build never leaves a partial cache entry.
func (b *build) storeTar(ctx context.Context, cached string) error {
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		return err
	}
	tmp := cached + ".partial"
	if err := b.run.Run(ctx, Cmd{Name: "tar", Args: []string{
		"--numeric-owner", "--xattrs", "--xattrs-include=*", "-C", b.rootfs, "-cf", tmp, "."}}); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, cached)
}

// untar extracts the cached base tar into dir.
func (b *build) untar(ctx context.Context, cached, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return b.run.Run(ctx, Cmd{Name: "tar", Args: []string{
		"--numeric-owner", "--xattrs", "--xattrs-include=*", "-C", dir, "-xpf", cached}})
}

func shortPath(p string) string {
	if home, err := os.UserHomeDir(); err == nil && strings.HasPrefix(p, home+"/") {
		return "~/" + strings.TrimPrefix(p, home+"/")
	}
	return p
}
