package role

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kiln-project/kiln/contract/discovery"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/internal/command"
	"github.com/kiln-project/kiln/manifests"
)

// nodeFiles owns the node's rendered files and the kubelet's start:
// what the manifests render for this node (kubelet config, static pods,
// etcd's configuration, node-local DNS), the host resolver, and what
// must be in place before the kubelet runs (the node-local address, the
// CNI configuration a restored node had).
type nodeFiles struct {
	env   nodeEnv
	sys   command.Runner
	local nodeLocal
	cni   *podNetwork
	// routeSource is the local address that reaches a master, a DHCP
	// node's kubelet address (nil: the kernel's choice, routeSource).
	routeSource func(dst netip.Addr) (netip.Addr, error)
}

// startNode writes the node's files (kubelet config and environment,
// static pods but those named in hold, etcd's configuration unless etcd
// is held, node-local DNS, the host resolver) and starts the kubelet.
func (f nodeFiles) startNode(ctx context.Context, p manifests.Params, hold []string) error {
	files, err := manifests.Files(p)
	if err != nil {
		return err
	}
	files = slices.DeleteFunc(files, func(f manifests.File) bool {
		if f.Path == manifests.EtcdConfigPath {
			return slices.Contains(hold, "etcd") // no membership to render yet
		}
		name, ok := staticPodName(f)
		return ok && slices.Contains(hold, name)
	})
	source := f.routeSource
	if source == nil {
		source = routeSource
	}
	ip, err := kubeletIP(ctx, f.env.file, source, 2*time.Minute)
	if err != nil {
		return err
	}
	files = append(files,
		manifests.File{Path: "/etc/kiln/kubelet.env", Content: []byte(kubeletEnv(f.env.file, ip))},
		manifests.File{Path: "/etc/resolv.conf", Content: []byte(hostResolvConf)},
	)
	for _, file := range files {
		if err := atomicfile.WriteFile(f.env.path(file.Path), file.Content, 0o644, nil); err != nil {
			return fmt.Errorf("writing %s: %w", file.Path, err)
		}
	}
	if err := f.seedZone(); err != nil {
		return err
	}
	if err := f.local.ensure(ctx); err != nil {
		return err
	}
	f.cni.restoreCNI()
	f.env.log("node files written: kubelet config, %d static pod(s), node-local DNS at %s", countPods(files), discovery.NodeLocalAddress)
	if _, err := f.sys.Run(ctx, "systemctl", "start", "--no-block", "kubelet.service"); err != nil {
		return fmt.Errorf("starting the kubelet: %w", err)
	}
	f.env.log("kubelet started (images are imported into containerd first)")
	return nil
}

// seedZone puts the zone kiln gen wrote into the live zone file, unless
// the CoreDNS anchor already keeps a newer one there.
func (f nodeFiles) seedZone() error {
	live := f.env.path(manifests.ZoneFile)
	if _, err := os.Stat(live); err == nil {
		return nil
	}
	seed, err := os.ReadFile(f.env.path(nodefile.ZonePath))
	if err != nil {
		return fmt.Errorf("the discovery zone kiln gen seeds: %w", err)
	}
	return atomicfile.WriteFile(live, seed, 0o644, nil)
}

// hostResolvConf sends the host's lookups to the node-local CoreDNS,
// which answers the discovery name and forwards the rest.
const hostResolvConf = "# written by kiln: the node-local CoreDNS answers the apiserver name and forwards the rest\nnameserver " +
	discovery.NodeLocalAddress + "\noptions timeout:2 attempts:3\n"

// writeStaticPods writes the static pods named in pods; the kubelet
// started by startNode picks them up from its manifest directory.
func (f nodeFiles) writeStaticPods(p manifests.Params, pods []string) error {
	files, err := manifests.Files(p)
	if err != nil {
		return err
	}
	for _, file := range files {
		if name, ok := staticPodName(file); ok && slices.Contains(pods, name) {
			if err := atomicfile.WriteFile(f.env.path(file.Path), file.Content, 0o644, nil); err != nil {
				return fmt.Errorf("writing %s: %w", file.Path, err)
			}
		}
	}
	return nil
}

// takeOutStaticPods removes the named pods' manifests, which the agent
// and the anchors render, from the kubelet's static pod directory before
// the kubelet starts, so that the kubelet does not start them from the
// last boot's files.
func (f nodeFiles) takeOutStaticPods(pods []string) error {
	dir := f.env.path(manifests.StaticPodDir)
	removed := false
	for _, name := range pods {
		err := os.Remove(filepath.Join(dir, name+".yaml"))
		switch {
		case err == nil:
			removed = true
		case !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("taking %s out of %s until its turn: %w", name, manifests.StaticPodDir, err)
		}
	}
	if !removed {
		return nil
	}
	return atomicfile.SyncDir(dir)
}

// staticPodName is the pod a file of the static pod directory holds.
func staticPodName(f manifests.File) (string, bool) {
	if filepath.Dir(f.Path) != manifests.StaticPodDir {
		return "", false
	}
	return strings.TrimSuffix(filepath.Base(f.Path), ".yaml"), true
}

func countPods(files []manifests.File) int {
	c := 0
	for _, f := range files {
		if filepath.Dir(f.Path) == manifests.StaticPodDir {
			c++
		}
	}
	return c
}
