package upgrade

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/upgradeask"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/internal/steps"
	"github.com/kiln-project/kiln/node/healthgate"
)

// Default bounds of a node's waits.
const (
	// DefaultStageBound: fetching three artifacts over the site's
	// network and writing the root slot.
	DefaultStageBound = 15 * time.Minute
	// DefaultRebootBound: the node going down and its kubelet reporting
	// the new boot.
	DefaultRebootBound = 10 * time.Minute
	// DefaultGateBound: the role done and, on a master, etcd and the
	// apiserver back.
	DefaultGateBound = 15 * time.Minute
)

// Bounds bound a node's waits; a zero one is its default.
type Bounds struct {
	Staged, Reboot, Gate time.Duration
}

// Gate is the health gate a rebooted node passes (healthgate.Gate).
type Gate interface {
	Check(ctx context.Context, t healthgate.Target) error
}

// Drainer takes a worker out of service and brings it back
// (nodeops.Drainer: kiln node remove's cordon and drain).
type Drainer interface {
	Cordon(ctx context.Context, node string, log retry.Logf) error
	Drain(ctx context.Context, node string, log retry.Logf) error
	Uncordon(ctx context.Context, node string, log retry.Logf) error
}

// Waiter waits, bounded, for check to pass, saying what it waits for
// (retry.Wait).
type Waiter interface {
	Wait(ctx context.Context, what string, bound time.Duration, log retry.Logf, check func(context.Context) error) error
}

// Clock tells the time the progress lines measure (time.Now).
type Clock interface {
	Now() time.Time
}

// Roller rolls a plan's nodes onto the target build, one at a time:
// before each, its pre-checks read again (Planner); a worker cordoned
// and drained; the node asked to stage the build and reboot (the ask);
// the waits for it to say staged, for its new boot and for the health
// gate; a worker uncordoned. It stops at the first node that refuses,
// fails or rolls back, leaving the nodes after it untouched.
type Roller struct {
	// Planner reads the cluster again before each node: its Kube is the
	// one the rollout writes through.
	Planner *Planner
	Gate    Gate
	Drainer Drainer
	// Ask is the build to ask for (AskFor); each node's request ID is
	// set here.
	Ask    upgradeask.Ask
	Bounds Bounds
	Wait   Waiter // retry.Wait if nil
	Clock  Clock  // time.Now if nil
	Log    retry.Logf
}

// ErrStopped is wrapped by Run's error for a node that did not roll.
var ErrStopped = errors.New("the rollout stopped")

// Run rolls each step of plan that is not skipped, in order. A plan that
// may not start (Plan.Err) changes nothing.
func (r *Roller) Run(ctx context.Context, plan *Plan) error {
	if err := plan.Err(); err != nil {
		return err
	}
	if err := r.uncordonDone(ctx, plan); err != nil {
		return err
	}
	todo := plan.ToRoll()
	for i, s := range todo {
		if err := r.node(s.Node, i+1, len(todo)).roll(ctx); err != nil {
			return fmt.Errorf("%w at node %s (%d of %d to roll; the nodes after it are untouched, and kiln upgrade run again resumes here): %w",
				ErrStopped, s.Node, i+1, len(todo), err)
		}
	}
	r.Log("every node of the site runs kiln sha256:%s, Kubernetes %s", short(r.Ask.KilnSHA256), r.Ask.Kubernetes)
	return nil
}

// uncordonDone uncordons each worker the plan skips that an earlier run
// cordoned and stopped before uncordoning: it runs the target, is
// cordoned, and carries this rollout's ask for the target's kiln.
func (r *Roller) uncordonDone(ctx context.Context, plan *Plan) error {
	for _, s := range plan.Steps {
		if s.Skip == "" || isMaster(s.Role) {
			continue
		}
		obj, err := r.Planner.Kube.CoreV1().Nodes().Get(ctx, s.Node, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading Node %s: %w", s.Node, err)
		}
		ask, err := upgradeask.DecodeAsk(obj.Annotations[upgradeask.AskAnnotation])
		if err != nil || !obj.Spec.Unschedulable || ask.KilnSHA256 != r.Ask.KilnSHA256 {
			continue
		}
		r.Log("%s: on the target image, still cordoned by an earlier run", s.Node)
		if err := r.Drainer.Uncordon(ctx, s.Node, r.Log); err != nil {
			return err
		}
	}
	return nil
}

// rolling is one node's roll: what it learns on the way.
type rolling struct {
	*Roller
	name, role string
	log        retry.Logf
	bootBefore string
	ask        upgradeask.Ask
	askedAt    time.Time
	// lastHeartbeat is the Ready heartbeat of the boot before, when the
	// node said it staged: the gate's Ready must be newer. It is the
	// node's clock, so the operator's clock cannot skew the gate.
	lastHeartbeat time.Time
}

func (r *Roller) node(name string, i, n int) *rolling {
	prefix := fmt.Sprintf("[%d/%d] %s: ", i, n, name)
	return &rolling{Roller: r, name: name, log: func(format string, args ...any) { r.Log(prefix+format, args...) }}
}

// roll re-checks the node's step, then runs its steps.
func (n *rolling) roll(ctx context.Context) error {
	s, err := n.recheck(ctx)
	if err != nil || s.Skip != "" {
		return err
	}
	n.role, n.bootBefore = s.Role, s.BootID
	n.ask = n.Ask
	n.ask.Request = requestID(n.name, n.bootBefore, n.ask)
	value, err := n.ask.Encode()
	if err != nil {
		return err
	}
	worker := func() bool { return !isMaster(n.role) }
	list := []steps.Step{
		{Name: "cordon", RunIf: worker, Run: func(ctx context.Context) error { return n.Drainer.Cordon(ctx, n.name, n.log) }},
		{Name: "drain", RunIf: worker, Run: func(ctx context.Context) error { return n.Drainer.Drain(ctx, n.name, n.log) }},
		{Name: "ask", Run: func(ctx context.Context) error { return n.writeAsk(ctx, value) }},
		{Name: "staged", Run: n.waitStaged},
		{Name: "reboot", Run: n.waitReboot},
		{Name: "health gate", Run: n.waitGate},
		{Name: "uncordon", RunIf: worker, Run: func(ctx context.Context) error { return n.Drainer.Uncordon(ctx, n.name, n.log) }},
	}
	run := steps.Runner{Wrap: func(step string, err error) error { return fmt.Errorf("%s: %w", step, err) }}
	if err := run.Run(ctx, list); err != nil {
		if worker() {
			return fmt.Errorf("%w (%s may stay cordoned: kubectl uncordon %s)", err, n.name, n.name)
		}
		return err
	}
	return nil
}

// recheck plans again and returns the node's step as it stands now: a
// refusal of it, or any problem, stops the rollout naming them.
func (n *rolling) recheck(ctx context.Context) (Step, error) {
	plan, err := n.Planner.Plan(ctx)
	if err != nil {
		return Step{}, fmt.Errorf("reading the cluster again before %s: %w", n.name, err)
	}
	for _, s := range plan.Steps {
		if s.Node != n.name {
			continue
		}
		var why []string
		for _, c := range s.Refusals {
			why = append(why, c.Name+": "+c.Why)
		}
		why = append(why, plan.Problems...)
		switch {
		case len(why) > 0:
			return s, fmt.Errorf("%s's pre-checks, read again just before it, refuse it: %s", n.name, strings.Join(why, "; "))
		case s.Skip != "":
			n.log("skipped: %s", s.Skip)
		}
		return s, nil
	}
	return Step{}, fmt.Errorf("%s is no longer in the site's plan", n.name)
}

func (n *rolling) writeAsk(ctx context.Context, value string) error {
	if err := writeAsk(ctx, n.Planner.Kube, n.name, value); err != nil {
		return err
	}
	n.askedAt = n.now()
	n.log("asked to stage kiln sha256:%s, Kubernetes %s, and reboot (request %s)", short(n.ask.KilnSHA256), n.ask.Kubernetes, n.ask.Request)
	return nil
}

// waitStaged waits for the node to say it staged the ask's build.
func (n *rolling) waitStaged(ctx context.Context) error {
	what := fmt.Sprintf("%s to stage the build of request %s (%s)", n.name, n.ask.Request, upgradeask.StagedAnnotation)
	err := n.wait(ctx, what, cmp.Or(n.Bounds.Staged, DefaultStageBound), func(ctx context.Context) error {
		obj, a, err := n.read(ctx)
		switch {
		case err != nil:
			return err
		case a.staged:
			n.lastHeartbeat = readyHeartbeat(obj)
			return nil
		}
		return errors.New("not staged yet")
	})
	if err != nil {
		return err
	}
	n.log("staged")
	return nil
}

// waitReboot waits for the Node to report a boot other than the one
// before the ask.
func (n *rolling) waitReboot(ctx context.Context) error {
	what := fmt.Sprintf("%s to reboot (its Node to report a boot other than %s)", n.name, n.bootBefore)
	err := n.wait(ctx, what, cmp.Or(n.Bounds.Reboot, DefaultRebootBound), func(ctx context.Context) error {
		obj, _, err := n.read(ctx)
		switch boot := obj.Status.NodeInfo.BootID; {
		case err != nil:
			return err
		case boot == "" || boot == n.bootBefore:
			return fmt.Errorf("the Node reports boot %q", boot)
		}
		return nil
	})
	if err != nil {
		return err
	}
	n.log("rebooted")
	return nil
}

// waitGate waits for the node to pass the health gate on its new boot.
func (n *rolling) waitGate(ctx context.Context) error {
	t := healthgate.Target{Node: n.name, Role: n.role, Boot: healthgate.After(n.bootBefore), Since: n.lastHeartbeat, RoleDone: healthgate.Published{}}
	what := fmt.Sprintf("%s to pass the health gate on its new boot", n.name)
	err := n.wait(ctx, what, cmp.Or(n.Bounds.Gate, DefaultGateBound), func(ctx context.Context) error {
		obj, _, err := n.read(ctx)
		if err != nil {
			return err
		}
		if err := n.Gate.Check(ctx, t); err != nil {
			return err
		}
		return n.onTarget(obj)
	})
	if err != nil {
		return err
	}
	n.log("passed the health gate in %s", n.now().Sub(n.askedAt).Round(time.Second))
	return nil
}

// onTarget is nil when the Node says it runs the ask's build: a node
// that passes the gate on its old image (its stage was never tried) has
// not rolled.
func (n *rolling) onTarget(obj *corev1.Node) error {
	if got := obj.Annotations[nodefile.KilnDigestAnnotation]; got != n.ask.KilnSHA256 {
		return fmt.Errorf("%s passed the health gate but runs kiln sha256:%s (%s), not the target's sha256:%s",
			n.name, short(got), nodefile.KilnDigestAnnotation, short(n.ask.KilnSHA256))
	}
	if got := obj.Status.NodeInfo.KubeletVersion; got != n.ask.Kubernetes {
		return fmt.Errorf("%s passed the health gate but its kubelet is %s, not the target's %s", n.name, got, n.ask.Kubernetes)
	}
	return nil
}

// readyHeartbeat is the Node's Ready heartbeat; zero without one.
func readyHeartbeat(obj *corev1.Node) time.Time {
	for _, c := range obj.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.LastHeartbeatTime.Time
		}
	}
	return time.Time{}
}

// read reads the Node and its answers to the ask; an answer that ends
// the step (a failed stage, a rollback) or a malformed one is final: it
// stops the wait. obj is never nil.
func (n *rolling) read(ctx context.Context) (*corev1.Node, answers, error) {
	obj, err := n.Planner.Kube.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		return &corev1.Node{}, answers{}, fmt.Errorf("reading Node %s: %w", n.name, err)
	}
	a, err := answersTo(obj, n.ask.Request)
	if err != nil {
		return obj, a, retry.Final(err)
	}
	if err := a.refusal(); err != nil {
		return obj, a, retry.Final(fmt.Errorf("%s answered request %s: %w", n.name, n.ask.Request, err))
	}
	return obj, a, nil
}

func (n *rolling) wait(ctx context.Context, what string, bound time.Duration, check func(context.Context) error) error {
	if n.Wait == nil {
		return retry.Wait(ctx, what, bound, n.log, check)
	}
	return n.Wait.Wait(ctx, what, bound, n.log, check)
}

func (n *rolling) now() time.Time {
	if n.Clock == nil {
		return time.Now()
	}
	return n.Clock.Now()
}
