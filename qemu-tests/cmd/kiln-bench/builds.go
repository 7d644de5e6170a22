package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/kiln-project/kiln/builder"
	"github.com/kiln-project/kiln/images"
)

// timed runs a command and returns how long it took.
func timed(ctx context.Context, name string, args ...string) (time.Duration, error) {
	start := time.Now()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	err := cmd.Run()
	if err != nil {
		return 0, fmt.Errorf("%s %v: %w", name, args, err)
	}
	return time.Since(start), nil
}

// benchBuilds times a build with an empty cache (everything downloaded and
// bootstrapped) and one with the warm cache.
func benchBuilds(ctx context.Context, o options, work string, r *report) error {
	head := [3]string{"build", "time", "floor"}
	if !o.skipCold {
		fmt.Fprintln(os.Stderr, "== cold build (empty cache)")
		d, err := timed(ctx, o.kiln, "build", "-o", filepath.Join(work, "out-cold"), "--cache", filepath.Join(work, "cold-cache"))
		if err != nil {
			return err
		}
		r.add("Build", head, row{"cold (empty kiln cache: debootstrap, apt downloads, component builds)", secs(d), "", "includes downloading every .deb; the Go module and build caches stay warm, so the Kubernetes/etcd/CoreDNS/containerd builds mostly link (cold Go caches: see README)"})
		os.RemoveAll(filepath.Join(work, "out-cold"))
		os.RemoveAll(filepath.Join(work, "cold-cache"))
	}
	fmt.Fprintln(os.Stderr, "== warm build")
	args := []string{"build", "-o", filepath.Join(work, "out-warm")}
	if o.cache != "" {
		args = append(args, "--cache", o.cache)
	}
	if _, err := timed(ctx, o.kiln, args...); err != nil { // make sure the cache is warm
		return err
	}
	d, err := timed(ctx, o.kiln, args...)
	if err != nil {
		return err
	}
	r.add("Build", head, row{"warm (cached base rootfs), nothing changed", secs(d), "", ""})

	// Issue 14's rebuild: kiln itself changed (an agent change, or a
	// manifest template, which is compiled into it): another kiln binary.
	changed := filepath.Join(work, "kiln-changed")
	if _, err := timed(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w -buildid= -X main.version=bench-"+time.Now().UTC().Format("20060102T150405"),
		"-o", changed, "./cmd/kiln"); err != nil {
		return fmt.Errorf("building a changed kiln: %w", err)
	}
	d, err = timed(ctx, changed, args...)
	if err != nil {
		return err
	}
	r.add("Build", head, row{"warm, after a change to kiln (agent or manifest template)", secs(d), "", "the kiln image packed again (gzip -6), the squashfs, ISO, raw disk and PXE set written again; goal: the floor + 10 s"})
	return nil
}

// benchFloor times the raw tools alone on the same root filesystem: the
// cached base, packed by mksquashfs and put in an ISO by xorriso.
func benchFloor(ctx context.Context, o options, work string, r *report) error {
	cache := o.cache
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "kiln")
	}
	tars, _ := filepath.Glob(filepath.Join(cache, "rootfs", "*.tar"))
	if len(tars) == 0 {
		return fmt.Errorf("no cached base rootfs in %s: run make image first", cache)
	}
	sort.Slice(tars, func(i, j int) bool { return modTime(tars[i]).After(modTime(tars[j])) })
	rootfs := filepath.Join(work, "floor-rootfs")
	os.MkdirAll(rootfs, 0o755)
	if _, err := timed(ctx, "tar", "--numeric-owner", "-C", rootfs, "-xpf", tars[0]); err != nil {
		return err
	}
	tree := filepath.Join(work, "floor-iso")
	os.MkdirAll(filepath.Join(tree, "LiveOS"), 0o755)
	spec, err := images.Load("")
	if err != nil {
		return err
	}
	comp := builder.SquashfsCompression(spec)
	sq, err := timed(ctx, "mksquashfs", append([]string{rootfs, filepath.Join(tree, "LiveOS", "squashfs.img"), "-noappend", "-no-progress", "-quiet"}, comp...)...)
	if err != nil {
		return err
	}
	iso, err := timed(ctx, "xorriso", "-as", "mkisofs", "-quiet", "-o", filepath.Join(work, "floor.iso"), "-V", "KILN", "-iso-level", "3", "-R", tree)
	if err != nil {
		return err
	}
	os.RemoveAll(rootfs)
	head := [3]string{"build", "time", "floor"}
	r.setFloor("Build", secs(sq+iso)+" (raw tools)")
	r.add("Build", head, row{"floor: raw tools on the same rootfs, mksquashfs (" + strings.Join(comp[1:], " ") + ") + xorriso", secs(sq + iso), "",
		fmt.Sprintf("mksquashfs %s, xorriso %s, on the base as cached (before kiln adds the components and prunes); the build adds the components, GRUB, FAT, GPT, the raw disk and the PXE set", secs(sq), secs(iso))})
	return nil
}

func modTime(p string) time.Time {
	fi, err := os.Stat(p)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// benchSizes lists every artifact of the image under test.
func benchSizes(_ context.Context, o options, _ string, r *report) error {
	data, err := os.ReadFile(filepath.Join(o.out, builder.ManifestName))
	if err != nil {
		return fmt.Errorf("reading the manifest of the image to boot: %w", err)
	}
	var m builder.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	for _, a := range m.Artifacts {
		r.add("Artifacts", [3]string{"artifact", "size", "sha256"}, row{a.Path, mib(a.Size), a.SHA256[:16] + "…", ""})
	}
	return nil
}
