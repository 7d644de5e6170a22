// Package imageseed owns the containerd store a node image carries
// ready-made, so a node's first boot runs its pods without importing
// (hashing and unpacking) the baked image archives first: on a slow
// machine that import took minutes of CPU the control plane needed.
//
// At build time Make imports the catalog's archives into a containerd
// run on the build host and keeps the parts of its store that hold the
// images (metadata, manifests and configs, unpacked snapshots); the
// builder packs them into a squashfs in the node image. On every boot,
// before containerd starts, Plant mounts that squashfs read-only and, when
// containerd's store on the state partition is not yet the seed's, plants
// it there: the small files are copied, each unpacked snapshot becomes a
// symbolic link into the mounted seed. Containers only read those
// snapshots (overlayfs lower layers); what a container writes goes to
// its own snapshot on the state partition.
package imageseed

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/kiln-project/kiln/node/catalog"
)

// Where the seed lives on a node.
const (
	// Image is the seed squashfs in the node image.
	Image = "/usr/lib/kiln/containerd-seed.squashfs"
	// MountDir is where Plant mounts it, read-only, on every boot.
	MountDir = "/run/kiln/containerd-seed"
	// Store is containerd's root (manifests.ContainerdConfig), on the
	// state partition.
	Store = "/var/lib/containerd"
	// Marker, in Store, names the seed the store was planted from. It
	// is written last: a plant cut short by a power cut has none, and
	// the next boot plants again.
	Marker = "kiln-seed.json"
	// ManifestName, at the seed's root, describes it.
	ManifestName = "seed.json"
	// TreeDir, at the seed's root, holds the store's files as
	// containerd laid them out.
	TreeDir = "store"
)

// The parts of containerd's root a seed carries. Everything else in it
// (the introspection plugin's uuid, the runtime's and the native
// snapshotter's directories) is the build host's own.
const (
	metadataDB    = "io.containerd.metadata.v1.bolt/meta.db"
	contentDir    = "io.containerd.content.v1.content"
	snapshotter   = "io.containerd.snapshotter.v1.overlayfs"
	snapshotsDir  = snapshotter + "/snapshots"
	formatVersion = "1"
)

// carried lists the parts of containerd's root Make keeps, in the order
// Plant writes them: the metadata database last, so containerd never
// opens one that names snapshots not yet planted.
var carried = []string{contentDir, snapshotter, metadataDB}

// Manifest is the seed's description (ManifestName) and, copied into the
// store, its Marker.
type Manifest struct {
	// Key identifies the seed: containerd's version and binary and the
	// images (reference and catalog digest). A store planted from
	// another key is not this image's.
	Key string `json:"key"`
	// Containerd is the version that wrote the store.
	Containerd string `json:"containerd"`
	// Images are the catalog entries the store holds.
	Images []catalog.Image `json:"images"`
	// Snapshots are the overlayfs snapshotter's snapshot IDs, each a
	// directory under the snapshotter's snapshots/.
	Snapshots []string `json:"snapshots"`
}

// KeyFor is the seed key of a containerd binary (by its sha256) and the
// images it holds. Archive paths do not count: the same image baked from
// another path is the same seed.
func KeyFor(containerdVersion, containerdSHA256 string, images []catalog.Image) string {
	lines := []string{"kiln containerd seed " + formatVersion, "containerd " + containerdVersion + " " + containerdSHA256}
	ims := append([]catalog.Image(nil), images...)
	sort.Slice(ims, func(i, j int) bool { return ims[i].Ref < ims[j].Ref })
	for _, im := range ims {
		lines = append(lines, "image "+im.Role+" "+im.Ref+" "+im.Digest)
	}
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ReadManifest reads a seed's (or a store's marker) description.
func ReadManifest(path string) (Manifest, error) {
	var m Manifest
	data, err := os.ReadFile(path)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("%s: %w", path, err)
	}
	if m.Key == "" {
		return m, fmt.Errorf("%s: no key", path)
	}
	for _, id := range m.Snapshots {
		if id == "" || id != filepath.Base(id) || id == "." || id == ".." {
			return m, fmt.Errorf("%s: snapshot %q is not a snapshot directory name", path, id)
		}
	}
	return m, nil
}

func (m Manifest) marshal() ([]byte, error) {
	data, err := json.MarshalIndent(m, "", "  ")
	return append(data, '\n'), err
}
