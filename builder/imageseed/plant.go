package imageseed

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/internal/command"
	"github.com/kiln-project/kiln/internal/mountinfo"
	"github.com/kiln-project/kiln/node/catalog"
)

// ErrNoSeed is Plant's answer on an image built without a seed.
var ErrNoSeed = errors.New("this node image carries no containerd seed (" + Image + ")")

// Planter plants the image's seed into containerd's store.
type Planter struct {
	Root string         // "/" on a node
	Sys  command.Runner // mount
	Log  func(format string, args ...any)
	Now  func() time.Time // nil: time.Now
}

// Result says what Plant did.
type Result struct {
	Seed       Manifest
	Planted    bool   // false: the store was the seed's already
	MovedAside string // where an earlier store went, if one was there
}

func (p *Planter) path(rel string) string { return filepath.Join(p.Root, rel) }

func (p *Planter) logf(format string, args ...any) {
	if p.Log != nil {
		p.Log(format, args...)
	}
}

// Plant mounts the seed and makes containerd's store the seed's. A store
// planted from this seed is left as it is (its images stay stamped). A
// store containerd has run on that is not this seed's (another image's
// seed, or images imported by a kiln without seeds) is moved, whole, to
// a kiln-replaced-<time> directory inside the store, never deleted, and
// the seed planted in its place. A store containerd never opened (no
// metadata database: empty, or a plant a power cut interrupted) is
// planted over. Run before containerd starts.
func (p *Planter) Plant(ctx context.Context) (Result, error) {
	image := p.path(Image)
	if _, err := os.Stat(image); errors.Is(err, fs.ErrNotExist) {
		return Result{}, ErrNoSeed
	}
	if err := p.mount(ctx, image); err != nil {
		return Result{}, err
	}
	seed, err := ReadManifest(p.path(filepath.Join(MountDir, ManifestName)))
	if err != nil {
		return Result{}, fmt.Errorf("reading the containerd seed: %w", err)
	}
	res := Result{Seed: seed}
	store := p.path(Store)
	if have, err := ReadManifest(filepath.Join(store, Marker)); err == nil && have.Key == seed.Key {
		return res, p.stamp(seed)
	}
	if _, err := os.Stat(filepath.Join(store, metadataDB)); err == nil {
		if res.MovedAside, err = p.moveAside(store); err != nil {
			return res, err
		}
	}
	if err := p.plant(seed, store); err != nil {
		return res, err
	}
	res.Planted = true
	return res, nil
}

// mount mounts the seed squashfs read-only on MountDir, unless it is.
func (p *Planter) mount(ctx context.Context, image string) error {
	mounted, err := p.mounted(MountDir)
	if err != nil || mounted {
		return err
	}
	if err := os.MkdirAll(p.path(MountDir), 0o755); err != nil {
		return err
	}
	if out, err := p.Sys.Run(ctx, "mount", "-t", "squashfs", "-o", "ro,loop", image, p.path(MountDir)); err != nil {
		return fmt.Errorf("mounting the containerd seed %s on %s: %w: %s", Image, MountDir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (p *Planter) mounted(dir string) (bool, error) {
	points, err := mountinfo.Points(p.path(mountinfo.Self))
	return slices.Contains(points, dir), err
}

// moveAside moves every entry of the store into a new kiln-replaced-
// directory inside it (a rename on the same filesystem: the store is a
// bind mount, and a rename out of it would cross mounts).
func (p *Planter) moveAside(store string) (string, error) {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	aside := filepath.Join(store, "kiln-replaced-"+now().UTC().Format("20060102T150405Z"))
	if err := os.Mkdir(aside, 0o700); err != nil {
		return "", fmt.Errorf("moving containerd's earlier store aside: %w", err)
	}
	entries, err := os.ReadDir(store)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "kiln-replaced-") {
			continue
		}
		if err := os.Rename(filepath.Join(store, e.Name()), filepath.Join(aside, e.Name())); err != nil {
			return "", fmt.Errorf("moving containerd's earlier store aside: %w", err)
		}
	}
	if err := atomicfile.SyncDir(store); err != nil {
		return "", err
	}
	p.logf("containerd's store held images this node image's seed does not (another image's, or imported): moved to %s (nothing deleted)",
		strings.TrimPrefix(aside, strings.TrimSuffix(p.Root, "/")))
	return aside, nil
}

// plant writes the seed into the store: directories as the seed has
// them, every small file copied (fsync, rename), every snapshot a link
// into the mounted seed; then the metadata database, the images' import
// stamps and, last, the marker.
func (p *Planter) plant(seed Manifest, store string) error {
	tree := p.path(filepath.Join(MountDir, TreeDir))
	snapshot := map[string]bool{}
	for _, id := range seed.Snapshots {
		snapshot[filepath.Join(snapshotsDir, id)] = true
	}
	for _, part := range carried {
		if part == metadataDB {
			continue
		}
		err := filepath.WalkDir(filepath.Join(tree, part), func(src string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(tree, src)
			dst := filepath.Join(store, rel)
			switch {
			case snapshot[rel]:
				return linkSnapshot(src, dst)
			case d.IsDir():
				return mkdirLike(src, dst)
			case d.Type().IsRegular():
				return copyFile(src, dst)
			default:
				return fmt.Errorf("containerd seed: %s is neither a file, a directory nor a snapshot", rel)
			}
		})
		if err != nil {
			return fmt.Errorf("planting the containerd seed: %w", err)
		}
	}
	if err := mkdirLike(filepath.Dir(filepath.Join(tree, metadataDB)), filepath.Dir(filepath.Join(store, metadataDB))); err != nil {
		return err
	}
	if err := copyFile(filepath.Join(tree, metadataDB), filepath.Join(store, metadataDB)); err != nil {
		return fmt.Errorf("planting the containerd seed: %w", err)
	}
	if err := p.stamp(seed); err != nil {
		return err
	}
	data, err := seed.marshal()
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(store, Marker), data, 0o644, nil)
}

// stamp marks the seed's images imported, so kiln images import leaves
// them (catalog.Import asks for a stamp and containerd's answer both).
func (p *Planter) stamp(seed Manifest) error {
	for _, im := range seed.Images {
		if err := catalog.Stamp(p.Root, im); err != nil {
			return err
		}
	}
	return nil
}

// linkSnapshot points the store's snapshot directory at the seed's,
// and tells the walk not to descend into it.
func linkSnapshot(src, dst string) error {
	if err := atomicfile.Symlink(src, dst); err != nil {
		return err
	}
	return fs.SkipDir
}

func mkdirLike(src, dst string) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, st.Mode().Perm()); err != nil {
		return err
	}
	return os.Chmod(dst, st.Mode().Perm())
}

func copyFile(src, dst string) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(dst, data, st.Mode().Perm(), nil)
}
