// Package firstboot is the kiln node agent: on every boot it finds the
// node's Ignition config, validates it, makes sure the state partition
// exists and is mounted, stores the config there and applies it. A
// config that replaces the stored one is a config change (change.go). It
// ends with exactly one console line: "kiln-firstboot: done
// source=<name>" (followed by " fell-back-from=<hash>" when the config
// failed and the previous one was applied) or "kiln-firstboot: error:
// <reason>".
package firstboot

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/firstboot/bootrecord"
	"github.com/kiln-project/kiln/firstboot/ignite"
	"github.com/kiln-project/kiln/firstboot/imageconf"
	"github.com/kiln-project/kiln/firstboot/source"
	"github.com/kiln-project/kiln/firstboot/state"
	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/internal/command"
	"github.com/kiln-project/kiln/internal/ignition"
	"github.com/kiln-project/kiln/internal/retry"
)

// System is everything the agent needs from the node besides files.
type System interface {
	command.Runner
	SetHostname(name string) error
}

// Agent runs the first-boot sequence on one node.
type Agent struct {
	Root    string    // "/" on a node
	Console io.Writer // the unit's stdout: journal and console
	Sys     System
	Systemd ignite.Systemd
	// Machine identifies the node to its state partition; nil reads
	// sysfs under Root.
	Machine state.Machine
	// Wait is how often to look again for a config; 0 means do not wait
	// (report "no config" as an error).
	Wait time.Duration
	// ReloadPause is the pause between attempts to reload networkd; 0
	// means 5 s.
	ReloadPause time.Duration
	// Version is this kiln's: a state layout it does not know is refused
	// naming it.
	Version string

	status   Status
	settings imageconf.Settings
	fetcher  *source.Fetcher
	// roots are the image's CA bundles over the system roots; nil: none.
	roots *x509.CertPool
	serve serveArgs
	// reports go to kiln serve (kiln.serve.url=); nil: nowhere.
	reports *reporter
}

const (
	prefix         = "kiln-firstboot: "
	inProgressPath = "/var/lib/kiln/firstboot.inprogress"
	stampDir       = nodefile.StampDir
)

// Run does the whole sequence and prints the final line. The returned
// error is the one the final line reports.
func (a *Agent) Run(ctx context.Context) error {
	a.status = Status{State: "running", BootID: a.bootID()}
	a.console("start boot_id=%s%s", a.status.BootID, processTimes(a.Root))
	a.readServeArgs()
	defer a.reports.wait()
	a.writeStatus()
	err := a.run(ctx)
	if err != nil {
		a.status.State, a.status.Error = "error", err.Error()
		a.writeStatus()
		a.failTrial(ctx, err)
		a.console("error: %s", oneLine(err.Error()))
		return err
	}
	a.status.State = "done"
	a.writeStatus()
	if fb := a.status.FellBack; fb != nil {
		a.console("done source=%s fell-back-from=%s", a.status.Source, fb.Failed)
		return nil
	}
	a.console("done source=%s", a.status.Source)
	return nil
}

func (a *Agent) run(ctx context.Context) error {
	if err := a.loadSettings(); err != nil {
		return err
	}
	st := &state.Manager{Root: a.Root, Sys: a.Sys, Log: a.logf, Settle: 15 * time.Second, Machine: a.Machine,
		Adopt: source.CmdlineArg(a.cmdline(), state.AdoptArg) == "1", Version: a.Version}
	haveState, err := a.openState(ctx, st)
	if err != nil {
		return err
	}
	a.trustServeCA(ctx)
	name, raw, err := a.config(ctx, haveState)
	if err != nil {
		return err
	}
	a.status.Source = name
	prev, err := a.previousConfig(haveState, name, raw)
	if err != nil {
		return err
	}
	cfg, err := a.parse(raw, "config from "+name)
	if err != nil {
		if prev != nil {
			err = fmt.Errorf("%w; config %s names no config to fall back to, so the previous config %s is not used either", err, ignition.Hash(raw), prev.hash)
		}
		return fmt.Errorf("%w; nothing was changed", err)
	}
	v, err := a.check(ctx, cfg, name, prev)
	if err != nil {
		return a.fallBack(ctx, cfg, raw, prev, err, true)
	}
	if !haveState {
		if haveState, err = a.createState(ctx, st, v.cfg); err != nil {
			return err
		}
	}
	a.noteResumed()
	err = a.apply(ctx, v, haveState, name, raw, prev)
	var failed *applyError
	if errors.As(err, &failed) {
		return a.fallBack(ctx, cfg, raw, prev, err, false)
	}
	return err
}

// check readies a config that parsed: a change of the stored config
// must keep the node's identity, and every content must resolve and
// fit the node. Nothing is written before this passes.
func (a *Agent) check(ctx context.Context, cfg ignitionConfig, name string, prev *previous) (*validated, error) {
	if prev != nil && prev.stored() {
		if err := a.checkIdentity(ctx, cfg, prev); err != nil {
			return nil, err
		}
	}
	return a.resolve(ctx, cfg, "config from "+name)
}

// openState mounts an existing state partition when it is this
// machine's, or has no record and the operator asked to adopt it.
// Another machine's, or one with no record otherwise, is left unmounted
// and untouched: this boot reads the other config sources and keeps its
// state in RAM. One whose layout this kiln does not know ends the boot's
// agent with its error, unmounted and untouched.
func (a *Agent) openState(ctx context.Context, st *state.Manager) (bool, error) {
	dev, found, err := st.Find(ctx)
	if err != nil || !found {
		return false, err
	}
	own, err := st.Mount(ctx, dev)
	var foreign *state.ForeignError
	var unknown *state.LayoutError
	switch {
	case errors.As(err, &unknown):
		// Not state in RAM: a node that ran without its state would make
		// itself anew (a genesis node, a new cluster).
		a.status.ForeignState = dev
		return false, fmt.Errorf("%w; nothing was changed", err)
	case errors.As(err, &foreign) && foreign.Unrecorded:
		a.status.ForeignState = dev
		a.step("%v: not using it, nor its config (if this machine made it with an earlier kiln, boot once with %s=1 to adopt it; else wipe that filesystem to let this machine make its own)", foreign, state.AdoptArg)
		return false, nil
	case errors.As(err, &foreign):
		a.status.ForeignState = dev
		a.step("%v: not using it, nor its config (wipe that filesystem to let this machine make its own)", foreign)
		return false, nil
	case err != nil:
		return false, err
	case own == state.Adopted:
		a.step("state partition %s has no record of its machine: adopting it for this machine, as %s=1 asks", dev, state.AdoptArg)
	}
	a.step("state partition %s mounted", dev)
	return true, nil
}

// validated is a config that parsed, validated and has all content resolved.
type validated struct {
	cfg  ignitionConfig
	plan *ignite.Plan
}

// validate parses a config and readies it (resolve); what names it in
// errors ("config from url").
func (a *Agent) validate(ctx context.Context, raw []byte, what string) (*validated, error) {
	cfg, err := a.parse(raw, what)
	if err != nil {
		return nil, err
	}
	return a.resolve(ctx, cfg, what)
}

// parse parses a config and prints its report when it is broken.
func (a *Agent) parse(raw []byte, what string) (ignitionConfig, error) {
	cfg, report, err := ignition.Parse(raw)
	var inv *ignition.InvalidError
	if errors.As(err, &inv) {
		a.status.Report = inv.Report
		for _, line := range inv.Report {
			a.console("config: %s", line)
		}
		return cfg, fmt.Errorf("invalid %s: %v", what, inv.Err)
	}
	if err != nil {
		return cfg, fmt.Errorf("%s: %w", what, err)
	}
	for _, w := range report {
		a.logf("config: %s", w)
	}
	return cfg, nil
}

// resolve resolves every content of a parsed config and checks the plan
// against the node.
func (a *Agent) resolve(ctx context.Context, cfg ignitionConfig, what string) (*validated, error) {
	plan, err := ignite.NewPlan(ctx, cfg, a.sources())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := a.applier().Check(plan); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return &validated{cfg: cfg, plan: plan}, nil
}

// sources is where a config's remote contents come from.
func (a *Agent) sources() ignite.Sources {
	return ignite.Sources{Fetcher: a.fetcher, AllowUnverified: a.settings.AllowUnverifiedConfig}
}

// createState makes the state partition on first boot. A diskless node
// keeps its state in RAM, so every boot of it is a first boot.
func (a *Agent) createState(ctx context.Context, st *state.Manager, cfg ignitionConfig) (bool, error) {
	a.status.FirstBoot = true
	if err := atomicfile.WriteFile(filepath.Join(a.Root, firstBootFlag), nil, 0o644, nil); err != nil {
		return false, err
	}
	if a.status.ForeignState != "" {
		a.step("the state partition on %s is not used: state stays in RAM", a.status.ForeignState)
		return false, nil
	}
	target, ok, err := st.TargetFor(ctx, cfg)
	if err != nil {
		return false, err
	}
	if !ok {
		a.step("no disk for the state partition: state stays in RAM")
		return false, nil
	}
	dev, err := st.Create(ctx, target)
	if err != nil {
		return false, err
	}
	if err := st.MountCreated(ctx, dev); err != nil {
		return false, err
	}
	a.step("state partition created on %s (%s)", target.Disk, dev)
	return true, nil
}

// failTrial fails this boot at once when it is the trying boot of a
// staged slot: the role does not run after a failed agent, so the boot
// cannot pass its health gate, and the rollback need not wait for the
// trial's deadline.
func (a *Agent) failTrial(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // stopped, not failed: the machine is going down
	}
	t, _, terr := trialOf(ctx, a.Root, a.Sys, a.logf)
	if terr != nil {
		a.console("this boot's slot is not judged: %v", terr)
	}
	if t == nil {
		return
	}
	if ferr := t.Fail(ctx, "agent: "+oneLine(err.Error())); !errors.Is(ferr, bootrecord.ErrFailed) {
		a.console("could not fail this trying boot (its deadline still will): %v", ferr)
	}
}

// noteResumed says when the previous boot died while applying.
func (a *Agent) noteResumed() {
	if old, err := os.ReadFile(filepath.Join(a.Root, inProgressPath)); err == nil {
		a.status.Resumed = true
		a.step("the previous boot did not finish applying its config (%s); applying again", strings.TrimSpace(string(old)))
	}
}

// apply stores the config (keeping the one it replaces, prev), then
// applies it between an in-progress stamp and its removal, so a boot
// that dies half way is visible on the next. The applier's failure is
// an *applyError.
func (a *Agent) apply(ctx context.Context, v *validated, haveState bool, name string, raw []byte, prev *previous) error {
	stamp := filepath.Join(a.Root, inProgressPath)
	if haveState {
		if err := a.store(name, raw, prev); err != nil {
			return err
		}
	}
	if err := atomicfile.WriteFile(stamp, []byte("boot "+a.status.BootID+"\n"), 0o644, nil); err != nil {
		return err
	}
	if err := a.applier().Apply(ctx, v.plan); err != nil {
		return &applyError{err}
	}
	a.step("config applied")
	a.reports.setName(appliedName(a.Root))
	a.reports.report("firstboot: config applied")
	if touchesNetwork(v.plan) {
		if err := a.reloadNetwork(ctx); err != nil {
			return fmt.Errorf("applying the config's network files: %w", err)
		}
	}
	if err := os.Remove(stamp); err != nil {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(stamp))
}

// store keeps the config on the state partition with its hash beside it
// (the config first: a power cut between the two leaves a hash that does
// not match, which a pinned boot does not rely on), after keeping the
// stored config it replaces (prev) as config.ign.prev. A stored config
// that is applied again gets its hash recorded when it has none (an
// earlier kiln stored it) or a stale one.
func (a *Agent) store(name string, raw []byte, prev *previous) error {
	hash := ignition.Hash(raw)
	hashPath := filepath.Join(a.Root, source.StateHashPath)
	if name != source.State {
		if prev != nil && prev.stored() {
			if err := a.keep(prev); err != nil {
				return err
			}
		}
		if err := atomicfile.WriteFile(filepath.Join(a.Root, source.StateConfigPath), raw, 0o600, nil); err != nil {
			return fmt.Errorf("storing the config on the state partition: %w", err)
		}
		if err := atomicfile.WriteFile(hashPath, []byte(hash+"\n"), 0o644, nil); err != nil {
			return fmt.Errorf("recording the stored config's hash: %w", err)
		}
		a.step("config stored on the state partition (%s)", hash)
		return nil
	}
	if recorded, err := os.ReadFile(hashPath); err == nil && strings.TrimSpace(string(recorded)) == hash {
		return nil
	}
	if err := atomicfile.WriteFile(hashPath, []byte(hash+"\n"), 0o644, nil); err != nil {
		return fmt.Errorf("recording the stored config's hash: %w", err)
	}
	a.step("stored config's hash recorded (%s)", hash)
	return nil
}

// cmdline is the kernel command line.
func (a *Agent) cmdline() string {
	b, _ := os.ReadFile(filepath.Join(a.Root, "/proc/cmdline"))
	return string(b)
}

// reloadAttempts is how many times the agent asks networkd to reload
// before it restarts it.
const reloadAttempts = 3

// reloadNetwork makes networkd apply the config's .network files: it
// configured the links before the config arrived, and a reload re-applies
// every link whose file changed. networkctl asks networkd over D-Bus, and
// on a loaded machine back from a power cut that can fail ("Failed to
// activate service 'org.freedesktop.network1': timed out"), so the
// reload is tried again, and the last resort is a
// restart, which systemctl asks of systemd without D-Bus. The agent runs
// before the node stack, so nothing but networkd notices the restart.
func (a *Agent) reloadNetwork(ctx context.Context) error {
	pause := cmp.Or(a.ReloadPause, 5*time.Second)
	reloads := retry.Times(ctx, reloadAttempts, pause, func(ctx context.Context, attempt int) error {
		_, err := a.Sys.Run(ctx, "networkctl", "reload")
		if err == nil {
			return nil
		}
		a.console("reloading systemd-networkd for the config's network files (attempt %d of %d): %s", attempt, reloadAttempts, oneLine(err.Error()))
		return fmt.Errorf("reload attempt %d: %w", attempt, err) // err names the command
	})
	if reloads == nil {
		a.step("network configuration reloaded")
		return nil
	}
	if ctx.Err() != nil {
		return reloads
	}
	if _, err := a.Sys.Run(ctx, "systemctl", "restart", "systemd-networkd.service"); err != nil {
		return errors.Join(reloads, fmt.Errorf("restart: %w", err))
	}
	a.step("network configuration applied by restarting systemd-networkd (networkctl reload failed %d times)", reloadAttempts)
	return nil
}

// loadSettings reads what the image spec tells the agent and makes the
// one fetcher configs and file contents come through.
func (a *Agent) loadSettings() error {
	s, err := imageconf.Load(a.Root)
	if err != nil {
		return err
	}
	roots, err := s.Roots(a.Root)
	if err != nil {
		return err
	}
	a.settings, a.fetcher, a.roots = s, source.NewFetcher(a.logf), roots
	a.fetcher.TrustRoots(roots)
	return nil
}

func (a *Agent) applier() *ignite.Applier {
	return &ignite.Applier{Root: a.Root, Persistent: state.PersistentDirs, StampDir: stampDir, Host: a.Sys, Systemd: a.Systemd, Log: a.logf}
}

func (a *Agent) bootID() string { return bootID(a.Root) }

// bootID is the kernel's ID of this boot under root, "unknown" when it
// cannot be read.
func bootID(root string) string {
	b, err := os.ReadFile(filepath.Join(root, "/proc/sys/kernel/random/boot_id"))
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func (a *Agent) step(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	a.status.Steps = append(a.status.Steps, msg)
	a.console("%s", msg)
}

func (a *Agent) console(format string, args ...any) {
	fmt.Fprintf(a.Console, prefix+format+"\n", args...)
}

func (a *Agent) logf(format string, args ...any) { a.console(format, args...) }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// touchesNetwork reports whether the plan writes systemd-networkd files.
func touchesNetwork(p *ignite.Plan) bool {
	for _, f := range p.Files {
		if strings.HasPrefix(f.Path, "/etc/systemd/network/") {
			return true
		}
	}
	return false
}
