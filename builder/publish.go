package builder

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kiln-project/kiln/images"
	"github.com/kiln-project/kiln/internal/atomicfile"
)

// Artifact names: tests and users rely on them.
const (
	ISOName      = "node.iso"
	RawName      = "node.raw"
	PXEDir       = "pxe"
	ManifestName = "node.manifest.json"
)

func artifactNames(s *images.Spec) []string {
	var names []string
	if s.Wants(images.OutputISO) {
		names = append(names, ISOName)
	}
	if s.Wants(images.OutputRaw) {
		names = append(names, RawName)
	}
	if s.Wants(images.OutputPXE) {
		names = append(names, PXEDir)
	}
	return append(names, ManifestName) // last: it describes the others
}

// publish moves each staged artifact over its output path with rename, so
// an output path holds either the previous artifact or the new one, never
// a partial file. A directory (pxe/) is swapped through a side name.
func publish(stage, out string, names []string) error {
	for _, name := range names {
		src, dst := filepath.Join(stage, name), filepath.Join(out, name)
		if fi, err := os.Stat(src); err != nil {
			return fmt.Errorf("publishing %s: %w", name, err)
		} else if fi.IsDir() {
			if err := atomicfile.ReplaceDir(src, dst); err != nil {
				return fmt.Errorf("publishing %s: %w", name, err)
			}
			continue
		}
		if err := os.Rename(src, dst); err != nil {
			return fmt.Errorf("publishing %s: %w", name, err)
		}
	}
	return atomicfile.SyncDir(out)
}

// removeStale deletes leftovers of an interrupted build: directories in dir
// whose names start with prefix. Mounts inside them are detached first so
// nothing outside the leftover is ever touched.
func removeStale(dir, prefix string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("looking for leftovers of an interrupted build: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := unmountUnder(p); err != nil {
			return fmt.Errorf("cleaning up %s: %w", p, err)
		}
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("cleaning up %s: %w", p, err)
		}
	}
	return nil
}
