// Package stage is a disk node's side of staging an upgrade: given the
// rollout's ask (contract/upgradeask) and the slot this boot runs from,
// a Stager writes the ask's build into the other root slot in
// contract/bootslot's two writes. The record first says the slot is
// being written (bootslot.Stage); then the root squashfs is streamed
// into the slot's partition, checked and read back, the kernel and
// initrd are installed on the ESP, and only then is the slot marked
// staged (bootslot.StageWritten) with the digest read back. A failure
// leaves the record as it was or in phase writing, which GRUB never
// boots. The package also keeps, on the state partition, which request
// the stage answers (Staged), for the node's answer after the reboot.
package stage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"time"

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/contract/netboot"
	"github.com/kiln-project/kiln/contract/upgradeask"
)

// Store is the boot-state record and the ESP, as bootrecord.Store keeps
// them: Update changes the record under a lock, Install writes a boot
// file through a synced rename and returns its hex sha256.
type Store interface {
	Update(change func(bootslot.Record) (bootslot.Record, error)) (bootslot.Record, error)
	Install(name string, r io.Reader) (string, error)
}

// DefaultFetchTimeout bounds each artifact's fetch, the root's write
// into its partition included: a root squashfs of a few GiB over a slow
// link still fits, and a server that stops answering does not hold the
// stage for ever.
const DefaultFetchTimeout = 30 * time.Minute

// Stager stages an ask's build into the root slot this boot does not
// run. One stage runs at a time on a node.
type Stager struct {
	Store Store
	Fetch Fetcher
	Disk  Partitions
	// FetchTimeout bounds each artifact's fetch; 0 is
	// DefaultFetchTimeout.
	FetchTimeout time.Duration
	// Log prints one progress line per artifact; nil is quiet.
	Log func(format string, args ...any)
}

// New is a Stager for the node whose file system is under root, with
// store on its mounted ESP.
func New(root string, store Store, log func(format string, args ...any)) *Stager {
	return &Stager{
		Store: store,
		Fetch: HTTPFetcher{},
		Disk:  DevPartitions{Root: root},
		Log:   log,
	}
}

// Result is what a stage did.
type Result struct {
	Slot  bootslot.Slot
	Image bootslot.Image
	// AlreadyStaged: the slot held this image, staged and not yet tried;
	// nothing was fetched.
	AlreadyStaged bool
	// Bytes is the root squashfs's size, written into the slot's
	// partition.
	Bytes int64
	// Write is how long the root's fetch and write took (until synced),
	// ReadBack how long reading it back from the partition took.
	Write, ReadBack time.Duration
}

// ImageFor is the image an ask stages, as the boot-state record keeps
// it: the version <kubernetes>+kiln.<the first 12 hex digits of
// kilnSHA256> (v1.37.1+kiln.0522ca4d8ea4) and the root squashfs's
// digest.
func ImageFor(a upgradeask.Ask) bootslot.Image {
	return bootslot.Image{
		Version: a.Kubernetes + "+kiln." + a.KilnSHA256[:min(12, len(a.KilnSHA256))],
		Digest:  "sha256-" + a.Artifacts.Rootfs,
	}
}

// ReleaseOf is the Kubernetes release of an image version ImageFor made,
// and whether version is one (the image a slot was built with has
// kiln's version instead).
func ReleaseOf(version string) (string, bool) {
	release, _, ok := strings.Cut(version, "+kiln.")
	return release, ok && release != ""
}

// Stage writes the ask's build into the slot booted does not run and
// marks it staged for one try. booted must be the record's active slot:
// a trying boot is judged (marked good or rolled back) before anything
// is staged. An ask for the image already staged there is answered at
// once. Each error names the step and the artifact.
func (s *Stager) Stage(ctx context.Context, ask upgradeask.Ask, booted bootslot.Slot) (Result, error) {
	if _, err := ask.Encode(); err != nil {
		return Result{}, fmt.Errorf("staging: %w", err)
	}
	slot, img := booted.Other(), ImageFor(ask)
	res := Result{Slot: slot, Image: img}
	fail := func(err error) (Result, error) {
		return res, fmt.Errorf("staging %s on slot %s: %w", img.Version, slot, err)
	}

	// The first write: slot is being written, which GRUB never boots.
	_, err := s.Store.Update(func(r bootslot.Record) (bootslot.Record, error) {
		switch {
		case r.Active != booted:
			return r, fmt.Errorf("this boot runs slot %s, but the record's active slot is %s (record: %s): "+
				"its trying boot must be marked good or rolled back before another stage", booted, r.Active, r.State())
		case r.Phase == bootslot.PhaseStaged && r.Staged == slot && r.Image(slot) == img &&
			r.Tries == bootslot.StageTries && r.FailReason == "":
			res.AlreadyStaged = true
			return r, nil
		}
		return bootslot.Stage(r, slot, img)
	})
	if err != nil {
		return fail(err)
	}
	if res.AlreadyStaged {
		s.log("kiln: slot %s already holds %s, staged: nothing to fetch", slot, img.Version)
		return res, nil
	}
	s.log("kiln: staging %s on slot %s from %s (each artifact within %s)", img.Version, slot, ask.URL, s.timeout())

	digest, err := s.writeRoot(ctx, ask, slot, &res)
	if err != nil {
		return fail(err)
	}
	if err := s.install(ctx, ask, netboot.Kernel, slot.Kernel(), ask.Artifacts.Kernel); err != nil {
		return fail(err)
	}
	if err := s.install(ctx, ask, netboot.Initrd, slot.Initrd(), ask.Artifacts.Initrd); err != nil {
		return fail(err)
	}
	if err := s.installArgs(slot, ask.Args); err != nil {
		return fail(err)
	}

	// The second write: staged for one try, only with the digest read
	// back from the partition.
	r, err := s.Store.Update(func(r bootslot.Record) (bootslot.Record, error) {
		return bootslot.StageWritten(r, slot, digest)
	})
	if err != nil {
		return fail(err)
	}
	s.log("kiln: slot %s staged with %s (record: %s)", slot, img.Version, r.State())
	return res, nil
}

// writeRoot streams the root squashfs into slot's partition, checks its
// digest, syncs and reads it back, and returns the digest read back
// (sha256-<hex>).
func (s *Stager) writeRoot(ctx context.Context, ask upgradeask.Ask, slot bootslot.Slot, res *Result) (string, error) {
	name, url, label := netboot.Rootfs, ask.ArtifactURL(netboot.Rootfs), slot.PartLabel()
	part, err := s.Disk.OpenPartition(label)
	if err != nil {
		return "", fmt.Errorf("opening slot %s's partition for %s: %w", slot, name, err)
	}
	defer part.Close() // synced before it is read back; a close changes nothing written

	ctx, cancel := s.fetchContext(ctx, name, url)
	defer cancel()
	start := time.Now()
	body, size, err := s.Fetch.Open(ctx, url)
	if err != nil {
		return "", fmt.Errorf("fetching %s: %w", name, timedOut(ctx, err))
	}
	defer body.Close()
	if size > part.Size() {
		return "", fmt.Errorf("%s from %s is %d bytes, larger than partition %s (%d bytes): nothing written",
			name, url, size, label, part.Size())
	}
	buf := make([]byte, 1<<20)
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(&partWriter{part: part}, h), body, buf)
	if err != nil {
		return "", fmt.Errorf("writing %s from %s into partition %s: %w", name, url, label, timedOut(ctx, err))
	}
	if got := sum(h); got != ask.Artifacts.Rootfs {
		return "", fmt.Errorf("%s from %s has sha256 %s, the ask's is %s", name, url, got, ask.Artifacts.Rootfs)
	}
	if err := part.Sync(); err != nil {
		return "", fmt.Errorf("syncing %s into partition %s: %w", name, label, err)
	}
	res.Bytes, res.Write = n, time.Since(start)

	start = time.Now()
	h.Reset()
	if _, err := io.CopyBuffer(h, io.NewSectionReader(part, 0, n), buf); err != nil {
		return "", fmt.Errorf("reading %s back from partition %s: %w", name, label, err)
	}
	res.ReadBack = time.Since(start)
	if got := sum(h); got != ask.Artifacts.Rootfs {
		return "", fmt.Errorf("%s reads back from partition %s with sha256 %s, it was written with %s",
			name, label, got, ask.Artifacts.Rootfs)
	}
	s.log("kiln: %s: %s into %s in %s, read back in %s", name, mib(n), label,
		res.Write.Round(time.Millisecond), res.ReadBack.Round(time.Millisecond))
	return "sha256-" + sum(h), nil
}

// install fetches the artifact name and installs it on the ESP at dst,
// checking its sha256 against want.
func (s *Stager) install(ctx context.Context, ask upgradeask.Ask, name, dst, want string) error {
	url := ask.ArtifactURL(name)
	ctx, cancel := s.fetchContext(ctx, name, url)
	defer cancel()
	start := time.Now()
	body, _, err := s.Fetch.Open(ctx, url)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", name, timedOut(ctx, err))
	}
	defer body.Close()
	c := &counter{r: body}
	got, err := s.Store.Install(dst, c)
	if err != nil {
		return fmt.Errorf("installing %s from %s at %s on the ESP: %w", name, url, dst, timedOut(ctx, err))
	}
	if got != want {
		return fmt.Errorf("%s from %s has sha256 %s, the ask's is %s", name, url, got, want)
	}
	s.log("kiln: %s: %s to %s on the ESP in %s", name, mib(c.n), dst, time.Since(start).Round(time.Millisecond))
	return nil
}

// installArgs writes the build's extra kernel arguments on the ESP as
// slot's arguments file, which GRUB passes when it boots the slot.
func (s *Stager) installArgs(slot bootslot.Slot, args []string) error {
	data, err := bootslot.EncodeArgs(args)
	if err != nil {
		return fmt.Errorf("the build's kernel arguments: %w", err)
	}
	if _, err := s.Store.Install(slot.Args(), bytes.NewReader(data)); err != nil {
		return fmt.Errorf("installing the build's kernel arguments at %s on the ESP: %w", slot.Args(), err)
	}
	return nil
}

func (s *Stager) timeout() time.Duration {
	if s.FetchTimeout > 0 {
		return s.FetchTimeout
	}
	return DefaultFetchTimeout
}

// fetchContext bounds the fetch of name; when the bound ends it, the
// context's cause says what it waited for.
func (s *Stager) fetchContext(ctx context.Context, name, url string) (context.Context, context.CancelFunc) {
	d := s.timeout()
	return context.WithTimeoutCause(ctx, d, fmt.Errorf("gave up waiting for %s from %s after %s", name, url, d))
}

// timedOut says what was waited for when the fetch's bound ended err's
// fetch and err does not say it already.
func timedOut(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && c != ctx.Err() && !errors.Is(err, c) {
		return fmt.Errorf("%w: %w", c, err)
	}
	return err
}

func (s *Stager) log(format string, args ...any) {
	if s.Log != nil {
		s.Log(format, args...)
	}
}

// partWriter writes a stream from the start of a partition and stops
// where it would pass the partition's end.
type partWriter struct {
	part Partition
	off  int64
}

func (w *partWriter) Write(p []byte) (int, error) {
	if w.off+int64(len(p)) > w.part.Size() {
		return 0, fmt.Errorf("it is larger than the partition (%d bytes); stopped after writing %d bytes", w.part.Size(), w.off)
	}
	n, err := w.part.WriteAt(p, w.off)
	w.off += int64(n)
	return n, err
}

// counter counts what is read through it.
type counter struct {
	r io.Reader
	n int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func sum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
