// Package builder bakes a kiln node image from an image spec.
//
// The pipeline is one list of numbered steps: base root filesystem
// (debootstrap + apt, cached by content), node configuration, the kiln agent,
// the components, the payload, what the spec prunes, the initramfs (dracut), the squashfs, the boot
// loaders, then one writer per requested artifact (ISO, raw disk, PXE) and
// the manifest. Everything is
// written into a staging directory beside the output and moved into place
// only when every step succeeded.
package builder

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/kiln-project/kiln/builder/imageseed"
	"github.com/kiln-project/kiln/images"
	"github.com/kiln-project/kiln/internal/mountinfo"
	"github.com/kiln-project/kiln/internal/steps"
	"github.com/kiln-project/kiln/internal/syncwriter"
	"github.com/kiln-project/kiln/node/catalog"
)

// Options configure one build.
type Options struct {
	Spec       *images.Spec
	OutDir     string // artifacts land here
	CacheDir   string // slow inputs, keyed by content
	KilnBinary string // the static kiln binary baked into the image
	Version    string // its kiln version, slot a's in the raw disk's boot-state record ("": "dev")
	// TestFailHealthGate bakes in layout.FailGateSwitch: a test-only
	// image whose trying boots fail their health gate.
	TestFailHealthGate bool
	Progress           io.Writer // one line per step start and end
	Runner             Runner    // nil: ExecRunner
	Now                func() time.Time
	// NoBaseOverlay untars the cached base into the work directory
	// instead of mounting an overlay on its extracted tree.
	NoBaseOverlay bool
}

// build is the state the steps share.
type build struct {
	opts     Options
	spec     *images.Spec
	run      Runner
	work     string // scratch: root filesystem, boot trees
	rootfs   string
	baseKey  string // the cached base root filesystem's key
	stage    string // artifacts before they are published
	kver     string // kernel version found in the root filesystem
	binaries []FileDigest
	images   []catalog.Image
	early    *earlyBuilds
	epochEnv string
	// seedMaker makes the containerd seed; nil is imageseed.Make (unit
	// tests swap it: the real one runs containerd).
	seedMaker func(context.Context, imageseed.MakeOptions) error
}

// Build runs the whole pipeline. On any failure, or when ctx is cancelled,
// the output directory is left as it was. An output directory CheckOutput
// refuses is refused before anything runs.
func Build(ctx context.Context, opts Options) error {
	if err := CheckOutput(opts.OutDir, opts.Spec); err != nil {
		return err
	}
	if opts.Runner == nil {
		opts.Runner = ExecRunner{Env: os.Environ()}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	opts.Progress = syncwriter.New(opts.Progress) // the early builds log too
	unlock, err := lockCache(opts.CacheDir)
	if err != nil {
		return err
	}
	defer unlock()
	b, cleanup, err := newBuild(opts)
	if err != nil {
		return err
	}
	defer cleanup()
	ctx, cancel := context.WithCancel(ctx)
	b.early = startEarlyBuilds(ctx, b)
	defer func() { cancel(); b.early.wait() }() // a failed step stops the early builds
	run := steps.Runner{
		Progress: steps.Lines(opts.Progress, opts.Now),
		Wrap:     func(step string, err error) error { return fmt.Errorf("step %q: %w", step, err) },
	}
	if err := run.Run(ctx, pipeline(b)); err != nil {
		return err
	}
	return publish(b.stage, opts.OutDir, artifactNames(b.spec))
}

// pipeline is the build, in order, each step printing its number, name
// and duration, and a failure naming its step. Artifact writers skip
// themselves when the spec does not ask for their output.
func pipeline(b *build) []steps.Step {
	wants := func(o images.Output) func() bool { return func() bool { return b.spec.Wants(o) } }
	return []steps.Step{
		{Name: "base root filesystem", Run: b.baseRootfs},
		{Name: "configure node", Run: b.configureNode},
		{Name: "kiln agent", Run: b.installAgent},
		{Name: "components", Run: b.installComponents, RunIf: func() bool { return b.spec.Components != nil }},
		{Name: "payload", Run: b.installPayload, RunIf: func() bool { return len(b.spec.Payload.Files) > 0 }},
		{Name: "prune", Run: b.prune, RunIf: func() bool { return len(b.spec.Prune.Paths) > 0 }},
		{Name: "initramfs (dracut)", Run: b.initramfs},
		{Name: "root squashfs", Run: b.squashfs},
		{Name: "boot loaders", Run: b.bootLoaders, RunIf: func() bool { return b.spec.Wants(images.OutputISO) || b.spec.Wants(images.OutputRaw) }},
		{Name: "iso", Run: b.writeISO, RunIf: wants(images.OutputISO)},
		{Name: "raw disk", Run: b.writeRaw, RunIf: wants(images.OutputRaw)},
		{Name: "pxe", Run: b.writePXE, RunIf: wants(images.OutputPXE)},
		{Name: "manifest", Run: b.writeManifest},
	}
}

func newBuild(opts Options) (*build, func(), error) {
	if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("creating output directory: %w", err)
	}
	if err := removeStale(opts.OutDir, ".kiln-build-"); err != nil {
		return nil, nil, err
	}
	workRoot := filepath.Join(opts.CacheDir, "work")
	if err := os.MkdirAll(workRoot, 0o755); err != nil {
		return nil, nil, fmt.Errorf("creating cache directory: %w", err)
	}
	if err := removeStale(workRoot, "build-"); err != nil {
		return nil, nil, err
	}
	stage, err := os.MkdirTemp(opts.OutDir, ".kiln-build-")
	if err != nil {
		return nil, nil, fmt.Errorf("creating staging directory: %w", err)
	}
	work, err := os.MkdirTemp(workRoot, "build-")
	if err != nil {
		os.RemoveAll(stage)
		return nil, nil, fmt.Errorf("creating work directory: %w", err)
	}
	b := &build{
		opts: opts, spec: opts.Spec, run: opts.Runner,
		work: work, rootfs: filepath.Join(work, "rootfs"), stage: stage,
		epochEnv: sourceDateEpochEnv(opts.Spec.SourceDateEpoch),
	}
	// go-diskfs takes FAT timestamps from SOURCE_DATE_EPOCH; it reads the
	// process environment, so the build sets it there.
	if err := os.Setenv("SOURCE_DATE_EPOCH", strconv.FormatInt(opts.Spec.SourceDateEpoch, 10)); err != nil {
		return nil, nil, err
	}
	cleanup := func() {
		mountinfo.UnmountUnder(work)
		os.RemoveAll(work)
		os.RemoveAll(stage)
	}
	return b, cleanup, nil
}

// sourceDateEpochEnv is the SOURCE_DATE_EPOCH environment entry for the
// spec's epoch, which every reproducible tool of the build is run with.
func sourceDateEpochEnv(epoch int64) string {
	return "SOURCE_DATE_EPOCH=" + strconv.FormatInt(epoch, 10)
}

// epoch is the spec's fixed timestamp for every file in every artifact.
func (b *build) epoch() time.Time { return time.Unix(b.spec.SourceDateEpoch, 0).UTC() }
