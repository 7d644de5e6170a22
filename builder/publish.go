package builder

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/kiln-project/kiln/contract/netboot"
	"github.com/kiln-project/kiln/images"
	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/internal/mountinfo"
	"github.com/kiln-project/kiln/internal/outdir"
)

// Artifact names: tests and users rely on them.
const (
	ISOName      = "node.iso"
	RawName      = "node.raw"
	PXEDir       = netboot.PXEDir
	ManifestName = netboot.ManifestName
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

// MarkerKind is the first line of the marker kiln build writes into its
// output directory, listing every artifact file it wrote there.
const MarkerKind = "kiln build"

// CheckOutput refuses an output directory a build of spec may not write
// into: out is not a directory, or an artifact path the build would
// replace (node.iso, node.raw, pxe/ and what is in it, node.manifest.json)
// holds something kiln did not write. Other files in out are no concern
// of the build's: it leaves them alone.
func CheckOutput(out string, spec *images.Spec) error {
	fi, err := os.Stat(out)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("output directory %s: %w", out, err)
	case !fi.IsDir():
		return &outdir.Refusal{Path: out, What: "is a file, not a directory",
			WayOut: "choose a directory (kiln build writes its artifacts into it), or remove the file yourself"}
	}
	owned, err := ownedOutputs(out)
	if err != nil {
		return err
	}
	return checkArtifacts(out, artifactNames(spec), owned)
}

// ownedOutputs is what in out an earlier build wrote: the paths its
// marker lists or, for the output of a kiln from before the marker, the
// artifacts its node.manifest.json lists and the manifest itself. A
// manifest that is not kiln's claims nothing.
func ownedOutputs(out string) (outdir.Set, error) {
	m, ok, err := outdir.ReadMarker(out)
	if err != nil {
		return nil, err
	}
	if ok && m.Kind != MarkerKind {
		return nil, &outdir.Refusal{Path: out, What: fmt.Sprintf("holds the output of %q (its %s says so)", m.Kind, outdir.MarkerName),
			WayOut: "choose another output directory for the build"}
	}
	if ok {
		return outdir.NewSet(m.Paths...), nil
	}
	man, ok := kilnManifest(filepath.Join(out, ManifestName))
	if !ok {
		return outdir.NewSet(), nil
	}
	paths := []string{ManifestName}
	for _, a := range man.Artifacts {
		paths = append(paths, filepath.ToSlash(a.Path))
	}
	return outdir.NewSet(paths...), nil
}

// kilnManifest reads the manifest at p; ok says it is there and is one
// kiln wrote: it names the image and its spec and lists artifacts.
func kilnManifest(p string) (m Manifest, ok bool) {
	data, err := os.ReadFile(p)
	if err != nil || json.Unmarshal(data, &m) != nil {
		return Manifest{}, false
	}
	return m, m.Name != "" && m.SpecSHA256 != "" && len(m.Artifacts) > 0
}

// checkArtifacts refuses the first artifact path in out that exists and
// that owned does not claim, down to each file in a directory artifact.
func checkArtifacts(out string, names []string, owned outdir.Set) error {
	for _, name := range names {
		p := filepath.Join(out, name)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("output %s: %w", p, err)
		}
		switch {
		case name == PXEDir && fi.IsDir():
			foreign, err := outdir.Foreign(p, func(rel string, _ fs.DirEntry) bool { return owned.Has(path.Join(name, rel)) })
			if err != nil {
				return err
			}
			if foreign != "" {
				return notKilns(filepath.Join(p, foreign), fmt.Sprintf("the build replaces %s/ as a whole", name))
			}
		case name != PXEDir && fi.Mode().IsRegular() && owned.Has(name):
		default:
			return notKilns(p, "the build would write over it")
		}
	}
	return nil
}

// notKilns is the refusal of an artifact path p that holds what kiln did
// not write.
func notKilns(p, why string) error {
	return &outdir.Refusal{Path: p,
		What:   fmt.Sprintf("is there and kiln did not write it (neither %s nor a kiln %s lists it), and %s", outdir.MarkerName, ManifestName, why),
		WayOut: "move it away yourself, or choose another output directory"}
}

// publish moves each staged artifact over its output path with rename, so
// an output path holds either the previous artifact or the new one, never
// a partial file. A directory (pxe/) is swapped through a side name.
// First it checks again that every path it replaces is kiln's, and adds
// what it is about to write to the marker, so that after an interrupted
// publish the next build still recognises every artifact as its own.
func publish(stage, out string, names []string) error {
	owned, err := ownedOutputs(out)
	if err != nil {
		return err
	}
	if err := checkArtifacts(out, names, owned); err != nil {
		return err
	}
	staged, err := stagedFiles(stage, names)
	if err != nil {
		return err
	}
	if err := markOutputs(out, append(present(out, owned), staged...)); err != nil {
		return err
	}
	for _, name := range names {
		if err := move(filepath.Join(stage, name), filepath.Join(out, name)); err != nil {
			return fmt.Errorf("publishing %s: %w", name, err)
		}
	}
	if err := markOutputs(out, present(out, outdir.NewSet(staged...), owned)); err != nil {
		return err
	}
	return atomicfile.SyncDir(out)
}

// move renames the staged artifact src over dst; a directory is swapped.
func move(src, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return atomicfile.ReplaceDir(src, dst)
	}
	return os.Rename(src, dst)
}

// stagedFiles lists the files of the named artifacts in stage, relative
// to it and slash-separated.
func stagedFiles(stage string, names []string) ([]string, error) {
	var paths []string
	for _, name := range names {
		err := filepath.WalkDir(filepath.Join(stage, name), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, err := filepath.Rel(stage, p)
			paths = append(paths, filepath.ToSlash(rel))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("publishing %s: %w", name, err)
		}
	}
	return paths, nil
}

// present is the files of the sets that are in out.
func present(out string, sets ...outdir.Set) []string {
	var paths []string
	for _, set := range sets {
		for p := range set {
			if fi, err := os.Lstat(filepath.Join(out, p)); err == nil && !fi.IsDir() {
				paths = append(paths, p)
			}
		}
	}
	return paths
}

// markOutputs replaces out's marker with one listing paths.
func markOutputs(out string, paths []string) error {
	if err := outdir.WriteMarker(out, outdir.Marker{Kind: MarkerKind, Paths: paths}); err != nil {
		return fmt.Errorf("publishing: %w", err)
	}
	return nil
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
		if err := mountinfo.UnmountUnder(p); err != nil {
			return fmt.Errorf("cleaning up %s: %w", p, err)
		}
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("cleaning up %s: %w", p, err)
		}
	}
	return nil
}
