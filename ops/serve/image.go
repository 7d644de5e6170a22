package serve

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"sort"

	"github.com/kiln-project/kiln/contract/netboot"
)

// image is one kiln build's PXE set, checked against its manifest.
type image struct {
	dir    string // as given
	pin    string // its name in URLs: /image/<pin>/...
	rootfs string // sha256-<hex> of rootfs.squashfs
	args   []string
	files  map[string]string // served name -> path
}

// served are the files of out/pxe/ a node fetches; boot.ipxe is checked
// too, for the image spec's kernel arguments it carries.
var served = []string{netboot.Kernel, netboot.Initrd, netboot.Rootfs}

// manifest is the part of the build's node.manifest.json kiln serve reads.
type manifest struct {
	Name      string               `json:"name"`
	Artifacts []netboot.FileDigest `json:"artifacts"`
}

// loadImages checks the default image and every pinned one.
func (s *Server) loadImages() error {
	byDir := map[string]*image{}
	load := func(dir, what string) (*image, error) {
		key := filepath.Clean(dir)
		if im, ok := byDir[key]; ok {
			return im, nil
		}
		im, err := loadImage(dir, what)
		if err != nil {
			return nil, err
		}
		if other, ok := s.images[im.pin]; ok {
			im = other // the same build in two directories
		}
		byDir[key], s.images[im.pin] = im, im
		return im, nil
	}
	def, err := load(s.cfg.Image, "--image")
	if err != nil {
		return err
	}
	names := make([]string, 0, len(s.cfg.Pins))
	for name := range s.cfg.Pins {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, ok := s.byName[name]; !ok {
			return refuse("--pin", name, "no node %q in %s", name, s.site.File)
		}
	}
	for _, n := range s.nodes {
		n.image = def
		if dir, ok := s.cfg.Pins[n.Name]; ok {
			if n.image, err = load(dir, "--pin "+n.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// loadImage reads dir's manifest and checks the PXE files against it.
func loadImage(dir, flag string) (*image, error) {
	mpath := filepath.Join(dir, netboot.ManifestName)
	data, err := os.ReadFile(mpath)
	if err != nil {
		return nil, refuse(mpath, "", "%v: %s %s is not the output of kiln build", unwrapPath(err), flag, dir)
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, refuse(mpath, "", "not a kiln build manifest: %v", err)
	}
	want := map[string]netboot.FileDigest{}
	for _, a := range m.Artifacts {
		want[a.Path] = a
	}
	im := &image{dir: dir, files: map[string]string{}}
	for _, name := range append(served, netboot.Script) {
		rel := path.Join(netboot.PXEDir, name)
		d, ok := want[rel]
		if !ok {
			return nil, refuse(mpath, "artifacts", "no %s: the image was built without the pxe output", rel)
		}
		p := filepath.Join(dir, filepath.FromSlash(rel))
		got, err := netboot.DigestFile(p)
		if err != nil {
			return nil, refuse(p, "", "%v (listed in %s)", unwrapPath(err), mpath)
		}
		if got.Size != d.Size || got.SHA256 != d.SHA256 {
			return nil, refuse(p, "", "does not match %s: %d bytes, sha256 %s on disk; the manifest says %d bytes, sha256 %s",
				mpath, got.Size, got.SHA256, d.Size, d.SHA256)
		}
		im.files[name] = p
		if name == netboot.Rootfs {
			im.rootfs = "sha256-" + d.SHA256
		}
	}
	script, err := os.ReadFile(im.files[netboot.Script])
	if err != nil {
		return nil, refuse(im.files[netboot.Script], "", "%v", unwrapPath(err))
	}
	args, ok := netboot.SpecArgs(string(script))
	if !ok {
		return nil, refuse(im.files[netboot.Script], "", "no kernel line kiln serve knows: built by another kiln version?")
	}
	im.args = args
	delete(im.files, netboot.Script)
	sum := sha256.Sum256(data)
	im.pin = hex.EncodeToString(sum[:6])
	return im, nil
}
