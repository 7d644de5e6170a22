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
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/firstboot/leave"
	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/internal/command"
	"github.com/kiln-project/kiln/internal/steps"
	"github.com/kiln-project/kiln/node/catalog"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// Node is the role's view of the machine, and what wires a run: its
// exported fields configure it, Run loads the node file and runs the
// role's phase list (genesisPhases, masterPhases, workerPhases). The
// work of each phase is done by the small units it is wired to
// (units.go), each given only what it needs of the Node.
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
	// DeferRoleDone keeps the role-done phase from publishing: on a
	// trying boot the role is done for the rollout only once the slot is
	// marked good, which PublishRoleDone then says.
	DeferRoleDone bool
	// Phase is told the path of each phase as it starts
	// ("master/etcd-join"); nil: nobody.
	Phase func(path string)

	file *nodefile.NodeFile
	cat  *catalog.Catalog
	// started is when this boot's role began: a Node heartbeat from
	// before it is a previous boot's.
	started time.Time
	// joinBounds overrides the etcd join's bounds (join.go) in tests.
	joinBounds joinBounds
	// probeBound bounds one probe of another master's etcd port; 0
	// means probeBound.
	probeBound time.Duration
	// u are this run's units (units.go), wired on first use, once the
	// node file is loaded.
	u *units
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
	n.file, n.cat, n.started, n.u = loaded.file, loaded.cat, time.Now(), nil
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
	r := steps.Runner{Parent: role, Stamps: stampFiles(filepath.Join(n.Root, StampDir))}
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
	f, err := nodefile.Read(filepath.Join(n.Root, nodefile.Path))
	if err != nil {
		return loaded{}, err
	}
	c, err := catalog.Read(filepath.Join(n.Root, catalog.Path))
	if err != nil {
		return loaded{}, err
	}
	return loaded{f, c}, nil
}

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
