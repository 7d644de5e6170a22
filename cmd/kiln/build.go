package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kiln-project/kiln/builder"
	"github.com/kiln-project/kiln/builder/gobuild"
	"github.com/kiln-project/kiln/images"
	"github.com/spf13/cobra"
)

func newBuildCmd() *cobra.Command {
	var specPath, outDir, cacheDir string
	var noOverlay, failGate bool
	cmd := &cobra.Command{
		Use:   "build [-f SPEC] [-o DIR]",
		Short: "Bake a node image (ISO, raw GPT disk, PXE set) from an image spec",
		Long: `Bake a bootable, immutable node image from an image spec.

With no -f, the default node spec (images/node.yaml, embedded in kiln) is used.
The build runs as root (debootstrap, chroot) and writes, in DIR:

  node.iso             hybrid ISO: BIOS and UEFI, CD or written raw to a USB disk
  node.raw             GPT disk image (UEFI): ESP + two root slots, the squashfs in the first
  pxe/                 vmlinuz, initrd.img, rootfs.squashfs, boot.ipxe
  node.manifest.json   kernel, packages, binaries and artifacts with sha256

Slow inputs (the Debian base root filesystem, downloaded packages) are cached
in the cache directory, keyed by a hash of what produced them. A warm build
mounts an overlay on the cached base, extracted once beside its tar, instead of
untarring it (--no-base-overlay, or a host without overlayfs, untars). Artifacts are
built aside and moved into DIR only when every step succeeded: a failed or
interrupted build leaves DIR as it was, and can simply be run again.

kiln build writes over an artifact path in DIR only when kiln wrote what is
there (its .kiln-output lists it, or, for an older kiln's output, its
node.manifest.json): an operator's own node.iso, or a file added to pxe/, makes
the build refuse before it starts. Other files in DIR are left alone.`,
		Example: `  kiln build -o out/
  kiln build -f images/node.yaml -o out/ --cache ~/.cache/kiln`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := images.Load(specPath)
			if err != nil {
				return inputError(err)
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("finding the kiln binary to bake in: %w", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBuild(ctx, builder.Options{
				Spec: spec, OutDir: outDir, CacheDir: cacheDir, KilnBinary: self, Version: version, Progress: cmd.ErrOrStderr(),
				NoBaseOverlay: noOverlay, TestFailHealthGate: failGate,
			})
		},
	}
	cmd.Flags().StringVarP(&specPath, "file", "f", "", "image spec (default: the embedded images/node.yaml)")
	cmd.Flags().StringVarP(&outDir, "output", "o", "out", "directory the artifacts are written to")
	cmd.Flags().StringVar(&cacheDir, "cache", defaultCacheDir(), "cache directory for slow inputs ($KILN_CACHE)")
	cmd.Flags().BoolVar(&failGate, "test-fail-health-gate", false, "a test-only image whose trying boots fail their health gate")
	cmd.Flags().MarkHidden("test-fail-health-gate")
	cmd.Flags().BoolVar(&noOverlay, "no-base-overlay", false, "untar the cached base root filesystem instead of mounting an overlay on its extracted tree (slower; the artifacts are the same)")
	return cmd
}

func runBuild(ctx context.Context, opts builder.Options) error {
	if err := builder.CheckOutput(opts.OutDir, opts.Spec); err != nil {
		return outputError(err)
	}
	if os.Geteuid() != 0 {
		return usageError{errors.New("build: must run as root (debootstrap and chroot need it)")}
	}
	start := time.Now()
	if err := builder.Build(ctx, opts); err != nil {
		return outputError(fmt.Errorf("build of %s failed (nothing in %s was changed): %w", opts.Spec.Metadata.Name, opts.OutDir, err))
	}
	fmt.Fprintf(opts.Progress, "built %s in %s into %s\n", opts.Spec.Metadata.Name, time.Since(start).Round(time.Second), opts.OutDir)
	return nil
}

func defaultCacheDir() string { return gobuild.DefaultCacheDir() }
