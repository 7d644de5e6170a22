// Package catalog owns the list of container images baked into a node
// image (/usr/lib/kiln/images.json): for each image kiln's manifests use
// (etcd, kube-apiserver, pause, ...) its reference, manifest digest and
// archive. The builder writes it; the node imports the archives into
// containerd before the kubelet starts, and the agent renders manifests
// from the references, so a manifest can only name an image that is baked.
package catalog

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"

	"github.com/kiln-project/kiln/contract/layout"
	"github.com/kiln-project/kiln/manifests"
)

// Path is where the catalog is in the node image; ArchiveDir holds the
// archives it lists.
const (
	Path       = layout.LibDir + "/images.json"
	ArchiveDir = layout.LibDir + "/images"
)

// The images kiln's manifests reference, by role.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
	Proxy             = "kube-proxy"
	CoreDNS           = "coredns"
	Pause             = "pause"
	Kiln              = "kiln"
)

// Roles are every image a node image must carry.
var Roles = []string{Etcd, APIServer, ControllerManager, Scheduler, Proxy, CoreDNS, Pause, Kiln}

// Image is one baked image.
type Image struct {
	Role    string `json:"role"`
	Ref     string `json:"ref"`
	Digest  string `json:"digest"`            // manifest digest, sha256:...
	Archive string `json:"archive,omitempty"` // path on the node; none when the image's containerd seed holds it
}

// Catalog is the document. KubernetesVersion is the release the image's
// Kubernetes components were baked from (empty in images built before it
// was recorded); a node refuses a node file asking for another.
type Catalog struct {
	KubernetesVersion string  `json:"kubernetesVersion,omitempty"`
	Images            []Image `json:"images"`
}

// Ref returns the reference of the image with the role.
func (c *Catalog) Ref(role string) (string, bool) {
	for _, im := range c.Images {
		if im.Role == role {
			return im.Ref, true
		}
	}
	return "", false
}

// Check reports a role with no image and a role listed twice.
func (c *Catalog) Check() error {
	seen := map[string]bool{}
	for _, im := range c.Images {
		if seen[im.Role] {
			return fmt.Errorf("image catalog: role %s is listed twice", im.Role)
		}
		seen[im.Role] = true
	}
	for _, r := range Roles {
		if !seen[r] {
			return fmt.Errorf("image catalog: no image for %s", r)
		}
	}
	return nil
}

// Manifests returns the references the manifests are rendered with.
func (c *Catalog) Manifests() manifests.Images {
	ref := func(r string) string { s, _ := c.Ref(r); return s }
	return manifests.Images{
		Etcd: ref(Etcd), APIServer: ref(APIServer), ControllerManager: ref(ControllerManager),
		Scheduler: ref(Scheduler), Proxy: ref(Proxy), CoreDNS: ref(CoreDNS), Pause: ref(Pause), Kiln: ref(Kiln),
	}
}

// ForRole is the catalog of the images a node of the role (genesis,
// master, worker) can run, in the order it imports them, and how many of
// them the kubelet needs before it starts: the pause sandbox and the
// images of the role's static pods (manifests.NodeImages).
func (c *Catalog) ForRole(role string) (cat *Catalog, boot int) {
	want, bootRefs := manifests.NodeImages(c.Manifests(), role)
	cat = &Catalog{KubernetesVersion: c.KubernetesVersion}
	for i, ref := range want {
		for _, im := range c.Images {
			if im.Ref == ref {
				cat.Images = append(cat.Images, im)
				if i < bootRefs {
					boot = len(cat.Images)
				}
				break
			}
		}
	}
	return cat, boot
}

// Refs lists every baked reference, sorted.
func (c *Catalog) Refs() []string {
	var out []string
	for _, im := range c.Images {
		out = append(out, im.Ref)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// Marshal renders the catalog, images sorted by role.
func (c *Catalog) Marshal() ([]byte, error) {
	sorted := *c
	sorted.Images = slices.Clone(c.Images)
	sort.Slice(sorted.Images, func(i, j int) bool { return sorted.Images[i].Role < sorted.Images[j].Role })
	data, err := json.MarshalIndent(sorted, "", "  ")
	return append(data, '\n'), err
}

// Read loads and checks a catalog file.
func Read(path string) (*Catalog, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the image catalog: %w", err)
	}
	var c Catalog
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := c.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}
