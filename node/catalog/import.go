package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/internal/command"
	"github.com/kiln-project/kiln/internal/syncwriter"
)

// Namespace is containerd's namespace for the kubelet's images.
const Namespace = "k8s.io"

// ImportedDir holds one stamp per imported catalog digest, on the state
// partition beside containerd's own store. containerd names a docker
// archive's image by a digest of its own making, so the stamp is what
// ties the catalog's digest to the import.
const ImportedDir = "/var/lib/kiln/images-imported"

// Import loads every archive containerd does not already hold from an
// earlier import: first the boot images (the first boot of the catalog's
// order, ForRole's count), then, after ready is called, the rest. Up to
// parallel archives are imported at once: containerd hashes and unpacks
// each on one core, so on a two-vCPU node two at a time give its static
// pods their images in half the time. The images live on the state
// partition, so a node imports once and every later boot only checks.
// ready, when not nil, is what the kubelet waits for.
//
// A node whose boot images were all stamped on an earlier boot (every
// restart) calls ready before it asks containerd anything: the stamps
// and containerd's store share the state partition, and a run of ctr
// on a slow machine costs a second or two that the kubelet's start, and
// with it the control plane's, would wait for. The check that follows still
// imports any image containerd lost.
func (c *Catalog) Import(ctx context.Context, root string, ctr command.Runner, log io.Writer, boot, parallel int, ready func()) error {
	boot = min(boot, len(c.Images))
	if ready != nil && allStamped(root, c.Images[:boot]) {
		ready()
		ready = nil
	}
	out, err := ctr.Run(ctx, "ctr", "-n", Namespace, "images", "ls")
	if err != nil {
		return fmt.Errorf("listing containerd's images: %w", err)
	}
	have := parseImageList(string(out))
	log = syncwriter.New(log) // the imports running at once write whole lines
	if err := importEach(ctx, root, ctr, log, c.Images[:boot], have, parallel); err != nil {
		return err
	}
	if ready != nil {
		ready()
	}
	return importEach(ctx, root, ctr, log, c.Images[boot:], have, parallel)
}

// importEach imports the images not both stamped and held, up to
// parallel at once, and returns the first failure once all have ended.
func importEach(ctx context.Context, root string, ctr command.Runner, log io.Writer, images []Image, have map[string]string, parallel int) error {
	slots := make(chan struct{}, max(parallel, 1))
	errs := make([]error, len(images))
	var wg sync.WaitGroup
	for i, im := range images {
		stamp := stampPath(root, im)
		if _, err := os.Stat(stamp); err == nil && have[im.Ref] != "" {
			continue
		}
		if im.Archive == "" {
			// A seeded image (imageseed) has no archive on the node.
			errs[i] = fmt.Errorf("%s is not in containerd's store, and this node image has no archive of it (it came in the image's containerd seed: is kiln-seed.service in error?)", im.Ref)
			continue
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			errs[i] = importOne(ctx, root, ctr, log, im)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func importOne(ctx context.Context, root string, ctr command.Runner, log io.Writer, im Image) error {
	start := time.Now()
	if _, err := ctr.Run(ctx, "ctr", "-n", Namespace, "images", "import", filepath.Join(root, im.Archive)); err != nil {
		return fmt.Errorf("importing %s from %s: %w", im.Ref, im.Archive, err)
	}
	if err := Stamp(root, im); err != nil {
		return err
	}
	fmt.Fprintf(log, "imported %s (%s) in %s\n", im.Ref, im.Digest, time.Since(start).Round(time.Millisecond))
	return nil
}

// allStamped is whether every one of images was stamped as imported.
func allStamped(root string, images []Image) bool {
	for _, im := range images {
		if _, err := os.Stat(stampPath(root, im)); err != nil {
			return false
		}
	}
	return true
}

// Stamp records that containerd holds the image, under root.
func Stamp(root string, im Image) error {
	return atomicfile.WriteFile(stampPath(root, im), []byte(im.Ref+"\n"), 0o644, nil)
}

func stampPath(root string, im Image) string {
	return filepath.Join(root, ImportedDir, strings.TrimPrefix(im.Digest, "sha256:"))
}

// parseImageList reads `ctr images ls`: REF TYPE DIGEST ... per line.
func parseImageList(out string) map[string]string {
	have := map[string]string{}
	for i, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 3 {
			continue
		}
		have[f[0]] = f[2]
	}
	return have
}
