// Package role makes a configured node what its node file says: the
// genesis node (a new control plane), a master joining the control plane
// (etcd learner, promotion, then the apiserver), or a worker. It runs
// after the agent applied the node's Ignition config, every boot: a
// role is a list of named phases; the node's files are re-rendered from
// the node file, the etcd membership record and the image's catalog, the
// kubelet is started, and the one-shot phases (bootstrap, join, add-ons,
// labels, validation) run until their stamp says they finished.
package role

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/contract/discovery"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/firstboot/leave"
	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/internal/command"
	"github.com/kiln-project/kiln/internal/steps"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/catalog"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// Node is the role's view of the machine.
type Node struct {
	Root string
	Sys  command.Runner // host commands (systemctl)
	Log  func(format string, args ...any)
	// Wait bounds each wait for the cluster (apiserver, Ready, a pod).
	Wait time.Duration
	// EtcdPort is where other masters' etcd is probed; 0 means 2379.
	EtcdPort int
	// APIAt is a client of the apiserver at a master's address; nil means
	// the agent's own kubeconfig pointed at that address.
	APIAt func(address string) (kubernetes.Interface, error)
	// EtcdQuorum is nil when this node's etcd member reads through
	// quorum; nil means a client of the member at the node's address.
	EtcdQuorum func(ctx context.Context) error
	// EtcdLeads reports whether this node's etcd member leads the
	// cluster; nil means a status call to the member at the node's
	// address.
	EtcdLeads func(ctx context.Context) (bool, error)
	// EtcdMembers lists the cluster's members through this node's etcd
	// member; nil means a client of the member at the node's address.
	EtcdMembers func(ctx context.Context) ([]etcdmember.Member, error)
	// Version is the agent's (the image's kiln), published on the Node
	// every boot; "" publishes nothing.
	Version string
	// Phase is told the path of each phase as it starts
	// ("master/etcd-join"); nil: nobody.
	Phase func(path string)

	file *nodefile.NodeFile
	cat  *catalog.Catalog
	// started is when this boot's role began: a Node heartbeat from
	// before it is a previous boot's.
	started time.Time
	// answering are the addresses of the masters whose etcd answered.
	answering  []string
	joinBounds joinBounds
	// probeBound bounds one probe of another master's etcd port; 0
	// means probeBound.
	probeBound time.Duration
	// beacon answers genesis surveys while this master waits to join
	// (beacon.go); beaconFailed: its start failed once and said so.
	beacon       *beacon
	beaconFailed bool
	// etcdPeers: this boot's control plane has other etcd members (its
	// member joined a cluster, on this boot or before, or others joined
	// its cluster), so its apiserver starts beside the cluster's RBAC
	// defaults and every quorum read waits on a peer.
	etcdPeers bool
}

// StampDir holds the one-shot steps' stamps, on the state partition.
const StampDir = nodefile.StampDir

// Result is what the role reports on its final line.
type Result struct {
	Role string
	// How the node got there: "bootstrapped" (a new cluster), "joined"
	// (an existing one), "restored" (a later boot, from the persisted
	// state).
	How string
}

// Run does the node's role. A node kiln node remove took out of the
// cluster does nothing: it stays out until it is re-imaged.
func (n *Node) Run(ctx context.Context) (Result, error) {
	if why, removed := leave.Removed(n.Root); removed {
		return Result{}, fmt.Errorf("this machine was %s; it stays out (no kubelet, no pods) until it is re-imaged with a blank state disk (%s)",
			strings.TrimSpace(why), nodefile.RemovedStamp)
	}
	loaded, err := loadFiles(n)
	if err != nil {
		return Result{}, err
	}
	n.file, n.cat, n.started = loaded.file, loaded.cat, time.Now()
	switch n.file.Role {
	case nodefile.RoleGenesis:
		return n.runGenesis(ctx)
	case nodefile.RoleMaster:
		return n.runRole(ctx, nodefile.RoleMaster, "joined", n.masterPhases())
	case nodefile.RoleWorker:
		return n.runRole(ctx, nodefile.RoleWorker, "joined", n.workerPhases())
	}
	return Result{}, fmt.Errorf("unknown role %q in %s", n.file.Role, nodefile.Path)
}

// phase is one named step of a role. A phase with Once set is stamped
// on the state partition when it succeeds and skipped on every later
// boot; the others run on every boot. Each is idempotent, so a role cut
// short by a power cut resumes from its first unstamped phase.
type phase = steps.Step

// runRole runs a role's phases in order, an error carrying the phase
// path (master/etcd-join: ...); the node was restored when every
// one-shot phase was stamped before this boot.
func (n *Node) runRole(ctx context.Context, role, how string, phases []phase) (Result, error) {
	r := steps.Runner{Parent: role, Stamps: stampFiles(n.path(StampDir))}
	if n.Phase != nil {
		r.Progress = func(ev steps.Event) {
			if ev.Kind == steps.Started {
				n.Phase(r.PathOf(ev.Name))
			}
		}
	}
	if r.AllDone(phases) {
		how = "restored"
	}
	return Result{Role: role, How: how}, r.Run(ctx, phases)
}

type loaded struct {
	file *nodefile.NodeFile
	cat  *catalog.Catalog
}

// loadFiles reads the node file (from the config) and the catalog (from
// the image).
func loadFiles(n *Node) (loaded, error) {
	f, err := nodefile.Read(n.path(nodefile.Path))
	if err != nil {
		return loaded{}, err
	}
	c, err := catalog.Read(n.path(catalog.Path))
	if err != nil {
		return loaded{}, err
	}
	return loaded{f, c}, nil
}

// params are the manifests' parameters for this node with its etcd
// membership (zero for a worker).
func (n *Node) params(m etcdmember.Membership) manifests.Params {
	return manifests.ForNode(*n.file, n.cat.Manifests(), m)
}

// afterPromotion are the components a joining master starts only once
// its etcd member votes: its apiserver talks to the local member, which
// must never be a learner.
var afterPromotion = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// startNode writes the node's files (kubelet config and environment,
// static pods but those named in hold, etcd's configuration unless etcd
// is held, node-local DNS, the host resolver) and starts the kubelet.
func (n *Node) startNode(ctx context.Context, p manifests.Params, hold []string) error {
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
	files = append(files,
		manifests.File{Path: "/etc/kiln/kubelet.env", Content: []byte(n.kubeletEnv())},
		manifests.File{Path: "/etc/resolv.conf", Content: []byte(hostResolvConf)},
	)
	for _, f := range files {
		if err := atomicfile.WriteFile(n.path(f.Path), f.Content, 0o644, nil); err != nil {
			return fmt.Errorf("writing %s: %w", f.Path, err)
		}
	}
	if err := n.seedZone(); err != nil {
		return err
	}
	if err := n.ensureNodeLocalAddress(ctx); err != nil {
		return err
	}
	n.restoreCNI()
	n.Log("node files written: kubelet config, %d static pod(s), node-local DNS at %s", countPods(files), discovery.NodeLocalAddress)
	if _, err := n.Sys.Run(ctx, "systemctl", "start", "--no-block", "kubelet.service"); err != nil {
		return fmt.Errorf("starting the kubelet: %w", err)
	}
	n.Log("kubelet started (images are imported into containerd first)")
	return nil
}

// seedZone puts the zone kiln gen wrote into the live zone file, unless
// the CoreDNS anchor already keeps a newer one there.
func (n *Node) seedZone() error {
	live := n.path(manifests.ZoneFile)
	if _, err := os.Stat(live); err == nil {
		return nil
	}
	seed, err := os.ReadFile(n.path(nodefile.ZonePath))
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
func (n *Node) writeStaticPods(p manifests.Params, pods []string) error {
	files, err := manifests.Files(p)
	if err != nil {
		return err
	}
	for _, f := range files {
		if name, ok := staticPodName(f); ok && slices.Contains(pods, name) {
			if err := atomicfile.WriteFile(n.path(f.Path), f.Content, 0o644, nil); err != nil {
				return fmt.Errorf("writing %s: %w", f.Path, err)
			}
		}
	}
	return nil
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

func (n *Node) path(p string) string { return filepath.Join(n.Root, p) }

// stamped reports whether the one-shot phase at path (master/etcd-join)
// succeeded on an earlier boot.
func (n *Node) stamped(path string) bool { return stampFiles(n.path(StampDir)).Done(path) }

// stampFiles are the one-shot phases' stamps: a file per phase path
// under the directory, holding the time it succeeded.
type stampFiles string

func (d stampFiles) Done(path string) bool {
	_, err := os.Stat(filepath.Join(string(d), path))
	return err == nil
}

func (d stampFiles) Mark(path string) error {
	return atomicfile.WriteFile(filepath.Join(string(d), path), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644, nil)
}

// errRefused marks a bootstrap refused because this node cannot rule
// out that a cluster already exists.
var errRefused = errors.New("refusing to bootstrap")
