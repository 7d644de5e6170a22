package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/kiln-project/kiln/builder/gobuild"
	"github.com/kiln-project/kiln/builder/ociimage"
	"github.com/kiln-project/kiln/contract/discovery"
	"github.com/kiln-project/kiln/contract/rtexec"
	"github.com/kiln-project/kiln/images"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/catalog"
)

// hostPrograms are the component programs that run on the host, not in a
// container, and where they go. containerd's replace Debian's 1.6 ones;
// the Debian package stays installed because docker.io depends on it.
var hostPrograms = map[string]string{
	"kubelet":                 "/usr/bin/kubelet",
	"kubectl":                 "/usr/bin/kubectl",
	"containerd":              "/usr/bin/containerd",
	"containerd-shim-runc-v2": "/usr/bin/containerd-shim-runc-v2",
	"ctr":                     "/usr/bin/ctr",
}

// packedImage says how kiln packs a role's image from a program when no
// prebuilt archive provides it: the program's path inside the image
// (where the official image has it) and the component whose version tags it.
type packedImage struct {
	role, program, path, component string
	withIptables                   bool
	entrypoint                     []string
}

var packedImages = []packedImage{
	{role: catalog.Etcd, program: "etcd", path: "/usr/local/bin/etcd", component: "etcd"},
	{role: catalog.APIServer, program: "kube-apiserver", path: "/usr/local/bin/kube-apiserver", component: "kubernetes"},
	{role: catalog.ControllerManager, program: "kube-controller-manager", path: "/usr/local/bin/kube-controller-manager", component: "kubernetes"},
	{role: catalog.Scheduler, program: "kube-scheduler", path: "/usr/local/bin/kube-scheduler", component: "kubernetes"},
	{role: catalog.Proxy, program: "kube-proxy", path: "/usr/local/bin/kube-proxy", component: "kubernetes", withIptables: true},
	{role: catalog.CoreDNS, program: "coredns", path: "/coredns", component: "coredns", entrypoint: []string{"/coredns"}},
}

// installComponents bakes the Kubernetes node stack: host programs into
// the root filesystem, every image the manifests use (kiln's own as an
// archive under /usr/lib/kiln/images, the others in the containerd seed),
// and the catalog listing them. It fails when a
// manifest kiln renders references an image that is not baked.
func (b *build) installComponents(ctx context.Context) error {
	c := b.spec.Components
	archives, err := b.fetchArchives(ctx, c)
	if err != nil {
		return err
	}
	programs, err := b.programs(ctx, c, archives)
	if err != nil {
		return err
	}
	for prog, dst := range hostPrograms {
		data, err := os.ReadFile(programs[prog])
		if err != nil {
			return fmt.Errorf("components: %s: %w", prog, err)
		}
		if err := writeFiles(b.rootfs, []file{{path: dst, data: string(data), mode: 0o755}}); err != nil {
			return err
		}
		b.binaries = append(b.binaries, digestBytes(dst, data))
	}
	if err := b.installRTExec(ctx); err != nil {
		return err
	}
	cat, err := b.packImages(c, programs, archives)
	if err != nil {
		return err
	}
	if err := checkReferences(cat); err != nil {
		return err
	}
	if err := b.seedImages(ctx, cat, programs); err != nil {
		return err
	}
	data, err := cat.Marshal()
	if err != nil {
		return err
	}
	b.images = cat.Images
	pause, _ := cat.Ref(catalog.Pause)
	return writeFiles(b.rootfs, append(nodeStackFiles(pause), file{path: catalog.Path, data: string(data), mode: 0o644}))
}

// installRTExec compiles rt-exec, which etcd's pod runs etcd through
// under the slow timing profile, and bakes it in at rtexec.Path. It is
// kiln's own program, so it is built whatever the spec takes from
// release URLs; being the standard library alone, it needs the Go
// toolchain and nothing from the module proxy.
func (b *build) installRTExec(ctx context.Context) error {
	bins, err := b.goBuild(ctx, gobuild.RTExecTarget())
	if err != nil {
		return fmt.Errorf("components: rt-exec: %w", err)
	}
	data, err := os.ReadFile(bins["rt-exec"])
	if err != nil {
		return fmt.Errorf("components: rt-exec: %w", err)
	}
	if err := writeFiles(b.rootfs, []file{{path: rtexec.Path, data: string(data), mode: 0o755}}); err != nil {
		return err
	}
	b.binaries = append(b.binaries, digestBytes(rtexec.Path, data))
	return nil
}

// nodeStackFiles configure the runtime for the kubelet: containerd with
// the baked pause image, and the dummy interface that holds the
// node-local DNS address.
func nodeStackFiles(pause string) []file {
	return []file{
		{path: manifests.ContainerdConfigPath, data: manifests.ContainerdConfig(pause), mode: 0o644},
		{path: "/etc/systemd/network/50-kiln-dns.netdev", mode: 0o644,
			data: "# kiln: the node-local DNS address lives on its own dummy interface\n[NetDev]\nName=" + discovery.NodeLocalLink + "\nKind=dummy\n"},
		{path: "/etc/systemd/network/50-kiln-dns.network", mode: 0o644, data: nodeLocalNetwork},
	}
}

// nodeLocalNetwork puts the node-local DNS address on its dummy link.
// The address is in 169.254.0.0/16, for which networkd runs IPv4 address
// conflict detection by default: the address waits out ARP probes on a
// link that carries no traffic. Every node holds the same address by
// design, so detection is off and the address is set at once. (A QEMU
// master once came back from a power cut without the address; the probe,
// cut short by the agent's networkctl reload, is the likeliest cause
// found, not a proven one: the role also checks, see role/nodelocal.go.)
var nodeLocalNetwork = `[Match]
Name=` + discovery.NodeLocalLink + `

[Link]
RequiredForOnline=no

[Network]
ConfigureWithoutCarrier=yes

[Address]
Address=` + discovery.NodeLocalAddress + `/32
DuplicateAddressDetection=none
`

// fetchArchives copies the spec's prebuilt image archives (checked
// against their sha256) into the image and reads their tags.
func (b *build) fetchArchives(ctx context.Context, c *images.Components) (map[string]catalog.Image, error) {
	out := map[string]catalog.Image{}
	for i, a := range c.Images {
		data, err := fetchVerified(ctx, b.spec.Dir, images.PayloadFile{Source: a.Source, SHA256: a.SHA256})
		if err != nil {
			return nil, fmt.Errorf("components.images[%d]: %w", i, err)
		}
		dst := path.Join(catalog.ArchiveDir, "archive-"+a.SHA256[:16]+".tar")
		if err := writeFiles(b.rootfs, []file{{path: dst, data: string(data), mode: 0o644}}); err != nil {
			return nil, err
		}
		im, err := archiveImage(filepath.Join(b.rootfs, dst))
		if err != nil {
			return nil, fmt.Errorf("components.images[%d] (%s): %w", i, a.Source, err)
		}
		im.Archive = dst
		if prev, dup := out[im.Role]; dup {
			return nil, fmt.Errorf("components.images[%d] (%s): a second image for %s (also %s)", i, a.Source, im.Role, prev.Ref)
		}
		out[im.Role] = im
	}
	return out, nil
}

// archiveImage reads a docker-archive's first tag and the image's digest;
// the role is the last element of the repository (registry.k8s.io/kube-apiserver
// is kube-apiserver).
func archiveImage(p string) (catalog.Image, error) {
	opener := func() (io.ReadCloser, error) { return os.Open(p) }
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return catalog.Image{}, fmt.Errorf("not a docker image archive: %w", err)
	}
	if len(m) != 1 || len(m[0].RepoTags) == 0 {
		return catalog.Image{}, fmt.Errorf("want one tagged image in the archive, found %d", len(m))
	}
	tag, err := name.NewTag(m[0].RepoTags[0], name.WeakValidation)
	if err != nil {
		return catalog.Image{}, err
	}
	img, err := tarball.Image(opener, &tag)
	if err != nil {
		return catalog.Image{}, err
	}
	d, err := img.Digest()
	if err != nil {
		return catalog.Image{}, err
	}
	return catalog.Image{Role: path.Base(tag.RepositoryStr()), Ref: tag.String(), Digest: d.String()}, nil
}

// programs finds every component program: a release binary from the spec
// (checked against its sha256), or a build from the Go module proxy. A
// component whose programs are all release binaries or prebuilt images is
// not built.
func (b *build) programs(ctx context.Context, c *images.Components, archives map[string]catalog.Image) (map[string]string, error) {
	out := map[string]string{}
	dir := filepath.Join(b.work, "programs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for _, nc := range c.Each() {
		var missing []string
		for i, bin := range nc.Binaries {
			data, err := fetchVerified(ctx, b.spec.Dir, images.PayloadFile{Source: bin.Source, SHA256: bin.SHA256})
			if err != nil {
				return nil, fmt.Errorf("components.%s.binaries[%d] (%s): %w", nc.Name, i, bin.Name, err)
			}
			p := filepath.Join(dir, bin.Name)
			if err := os.WriteFile(p, data, 0o755); err != nil {
				return nil, err
			}
			out[bin.Name] = p
		}
		for _, prog := range images.Programs[nc.Name] {
			if _, ok := out[prog]; !ok && !providedByArchive(prog, archives) {
				missing = append(missing, prog)
			}
		}
		if len(missing) == 0 {
			continue
		}
		if len(nc.Binaries) > 0 {
			return nil, fmt.Errorf("components.%s: no binary and no image archive for %s: list them in binaries, or drop binaries to build %s %s from the module proxy",
				nc.Name, strings.Join(missing, ", "), nc.Name, nc.Version)
		}
		built, err := b.buildComponent(ctx, nc)
		if err != nil {
			return nil, err
		}
		for prog, p := range built {
			out[prog] = p
		}
	}
	return out, nil
}

func providedByArchive(prog string, archives map[string]catalog.Image) bool {
	if _, host := hostPrograms[prog]; host {
		return false
	}
	_, ok := archives[prog]
	return ok
}

// earlyBuilds are the module-proxy builds of the components built from
// source, started with the build so they overlap the base root filesystem
// (downloads and debootstrap); the components step waits for them. Only a
// spec with no release binaries and no prebuilt archives for a component
// builds it early: otherwise the step decides what is missing.
type earlyBuilds struct {
	done chan struct{}
	bins map[string]gobuild.Binaries
	err  error
}

func startEarlyBuilds(ctx context.Context, b *build) *earlyBuilds {
	e := &earlyBuilds{done: make(chan struct{}), bins: map[string]gobuild.Binaries{}}
	c := b.spec.Components
	if c == nil || len(c.Images) > 0 {
		close(e.done)
		return e
	}
	go func() {
		defer close(e.done)
		for _, nc := range c.Each() {
			if len(nc.Binaries) > 0 {
				continue
			}
			bins, err := b.compile(ctx, nc)
			if err != nil {
				e.err = err
				return
			}
			e.bins[nc.Name] = bins
		}
	}()
	return e
}

func (e *earlyBuilds) wait() { <-e.done }

// buildComponent returns a component's programs built from its Go module,
// from the early builds when they made them.
func (b *build) buildComponent(ctx context.Context, nc images.NamedComponent) (gobuild.Binaries, error) {
	if b.early != nil {
		b.early.wait()
		if b.early.err != nil {
			return nil, b.early.err
		}
		if bins, ok := b.early.bins[nc.Name]; ok {
			return bins, nil
		}
	}
	return b.compile(ctx, nc)
}

// compile builds a component's programs from its Go module.
func (b *build) compile(ctx context.Context, nc images.NamedComponent) (gobuild.Binaries, error) {
	var t gobuild.Target
	switch nc.Name {
	case "kubernetes":
		var err error
		if t, err = gobuild.ResolveKubernetesTarget(ctx, nc.Version, b.epoch().Format(time.RFC3339)); err != nil {
			return nil, fmt.Errorf("components.kubernetes: %w", err)
		}
	case "etcd":
		t = gobuild.EtcdTarget(nc.Version)
	case "coredns":
		t = gobuild.CoreDNSTarget(nc.Version)
	case "containerd":
		t = gobuild.ContainerdTarget(nc.Version)
	default:
		return nil, fmt.Errorf("components: no build for %s", nc.Name)
	}
	bins, err := b.goBuild(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("components.%s: %w", nc.Name, err)
	}
	return bins, nil
}

// goBuild builds a target with the build's cache and progress writer.
func (b *build) goBuild(ctx context.Context, t gobuild.Target) (gobuild.Binaries, error) {
	return gobuild.Builder{CacheDir: b.opts.CacheDir, Log: b.opts.Progress}.Build(ctx, t)
}

// packImages writes an archive for every role no prebuilt archive
// provides, and returns the catalog of all of them.
func (b *build) packImages(c *images.Components, programs map[string]string, archives map[string]catalog.Image) (*catalog.Catalog, error) {
	cat := &catalog.Catalog{KubernetesVersion: c.Kubernetes.Version}
	versions := map[string]string{}
	for _, nc := range c.Each() {
		versions[nc.Name] = nc.Version
	}
	for _, p := range packedImages {
		if im, ok := archives[p.role]; ok {
			cat.Images = append(cat.Images, im)
			continue
		}
		files := []ociimage.File{{Path: p.path, Source: programs[p.program], Mode: 0o755}}
		if p.withIptables {
			ipt, err := iptablesFiles(b.rootfs)
			if err != nil {
				return nil, fmt.Errorf("image %s: %w", p.role, err)
			}
			files = append(files, ipt...)
		}
		im, err := b.pack(ociimage.Spec{Ref: "kiln.local/" + p.role + ":" + versions[p.component], Files: files, Entrypoint: p.entrypoint}, p.role)
		if err != nil {
			return nil, err
		}
		cat.Images = append(cat.Images, im)
	}
	// The images kiln packs from its own binary and from the root
	// filesystem, unless the spec gives their archives.
	for _, own := range []struct {
		role string
		pack func() (catalog.Image, error)
	}{{catalog.Kiln, b.packKiln}, {catalog.Pause, b.packPause}} {
		if a, ok := archives[own.role]; ok {
			cat.Images = append(cat.Images, a)
			continue
		}
		im, err := own.pack()
		if err != nil {
			return nil, err
		}
		cat.Images = append(cat.Images, im)
	}
	for role, a := range archives {
		if !isRole(role) {
			cat.Images = append(cat.Images, a) // an extra image the operator wants on every node
		}
	}
	return cat, cat.Check()
}

// packKiln packs the kiln image, which runs the anchors and the add-on
// helpers, kiln-net among them: kiln-net keeps routes and iptables
// rules, so the image carries the node's ip and nft iptables. It does
// not carry kiln: its pods mount the node's own binary
// (manifests.MountKilnBinary), so the image is tagged by its tools and
// stays in the containerd seed across changes to kiln. (With kiln in it,
// every first boot would import it: the best part of a minute of a slow
// one-vCPU node's CPU, beside the control plane's start.)
func (b *build) packKiln() (catalog.Image, error) {
	tools, err := kilnNetFiles(b.rootfs)
	if err != nil {
		return catalog.Image{}, fmt.Errorf("image %s (kiln-net's ip and iptables): %w", catalog.Kiln, err)
	}
	tag, err := filesTag(tools)
	if err != nil {
		return catalog.Image{}, fmt.Errorf("image %s: %w", catalog.Kiln, err)
	}
	return b.pack(ociimage.Spec{Ref: "kiln.local/kiln:" + tag, Files: tools, Entrypoint: []string{manifests.KilnInImage}}, catalog.Kiln)
}

// The pause image, every pod's sandbox process, is Debian's catatonit in
// pause mode: 0.7 MB, where a Go binary is tens of MB that every node
// imports before its first pod and every sandbox loads.
//
// pauseBinary is where the catatonit package puts its static binary.
const pauseBinary = "/usr/bin/catatonit"

func (b *build) packPause() (catalog.Image, error) {
	src := filepath.Join(b.rootfs, pauseBinary)
	if _, err := os.Stat(src); err != nil {
		return catalog.Image{}, fmt.Errorf("image %s: no %s in the root filesystem: the pause image is catatonit, add the catatonit package to packages (or give a pause archive under components.images)", catalog.Pause, pauseBinary)
	}
	tag, err := fileTag(src)
	if err != nil {
		return catalog.Image{}, err
	}
	return b.pack(ociimage.Spec{Ref: "kiln.local/pause:" + tag, Files: []ociimage.File{{Path: "/catatonit", Source: src, Mode: 0o755}},
		Entrypoint: []string{"/catatonit", "-P"}}, catalog.Pause)
}

func isRole(r string) bool {
	for _, x := range catalog.Roles {
		if x == r {
			return true
		}
	}
	return false
}

// pack writes the image s as the role's archive in the root filesystem;
// its timestamps are the spec's epoch.
func (b *build) pack(s ociimage.Spec, role string) (catalog.Image, error) {
	dst := path.Join(catalog.ArchiveDir, role+".tar")
	full := filepath.Join(b.rootfs, dst)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return catalog.Image{}, err
	}
	cache := archiveCache{dir: filepath.Join(b.opts.CacheDir, "archives")}
	s.Created = b.epoch()
	res, cached, err := cache.write(s, full)
	if err != nil {
		return catalog.Image{}, err
	}
	how := "packed"
	if cached {
		how = "cached"
	}
	fmt.Fprintf(b.opts.Progress, "    image %s %s (%s)\n", res.Ref, res.Digest, how)
	return catalog.Image{Role: role, Ref: res.Ref, Digest: res.Digest, Archive: dst}, nil
}

// filesTag is a short tag for an image of files: the hash of each one's
// path, mode and content.
func filesTag(files []ociimage.File) (string, error) {
	h := sha256.New()
	for _, f := range files {
		data, err := os.ReadFile(f.Source)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %o %d\n", f.Path, f.Mode, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// fileTag is a short content tag for an image made from one file.
func fileTag(p string) (string, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])[:12], nil
}

// checkReferences renders every manifest kiln puts on a node, for every
// role, and fails on an image that is not in the catalog: an air-gapped
// node must not find a missing image at boot.
func checkReferences(cat *catalog.Catalog) error {
	baked := map[string]bool{}
	for _, r := range cat.Refs() {
		baked[r] = true
	}
	for _, ref := range manifests.ReferencedImages(cat.Manifests()) {
		if !baked[ref] {
			return fmt.Errorf("components: the manifests reference image %s, which is not baked into the image", ref)
		}
	}
	return nil
}
