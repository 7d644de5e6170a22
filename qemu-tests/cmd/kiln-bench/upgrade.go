package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kiln-project/kiln/contract/imagemanifest"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
	"github.com/kiln-project/kiln/qemu-tests/console"
	"github.com/kiln-project/kiln/qemu-tests/netns"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

// The upgrade part's node has the genesis part's shape: the one VM of
// the part gets both of this host's cores.
const (
	upgradeCPUs   = 2
	upgradeMemMiB = 3072
)

// The upgrade part's bounds, each on one wait of a roll.
const (
	// upgradeStageBound: kiln upgrade's plan, the node's upgrade service
	// seeing the ask, its fetch, write and read-back (the rollout's own
	// bound on the stage is 15 min).
	upgradeStageBound = 20 * time.Minute
	// upgradeDownBound: the staged node's shutdown, to QEMU's exit.
	upgradeDownBound = 3 * time.Minute
	// upgradeTryBound: power-on to the trying boot's first line of the
	// agent, as a plain boot's bound.
	upgradeTryBound = 8 * time.Minute
	// upgradeGateBound: the trying boot's role and its health gate.
	upgradeGateBound = 15 * time.Minute
	// upgradeEndBound: the rollout's own health gate after the node's,
	// to kiln upgrade's exit.
	upgradeEndBound = 15 * time.Minute
)

// rolloutDone is what kiln upgrade prints when every node runs the target.
const rolloutDone = "every node of the site runs kiln sha256:"

var (
	upgradeShape = fmt.Sprintf("%d vCPUs, %d GiB", upgradeCPUs, upgradeMemMiB/1024)
	upgradeTitle = "Upgrade (`node.raw` under OVMF, " + upgradeShape + ", TCG, `timing: slow`; a genesis node on a bridge in a network namespace, " +
		"rolled by `kiln upgrade --accept-outage` onto v2, v1 and v2 in turn; the node's lines read on its serial console every 0.1 s)"
	upgradeHead = [3]string{"step: median of three rolls", "time",
		"floor: the faster of two plain boots of the same disk to the login prompt (its kernel booted directly under OVMF, agent masked, " + upgradeShape + ")"}
	upgradeTimeline = "Upgrade timeline (`node.raw` under OVMF, " + upgradeShape + "; each row from its boot's power-on)"
)

// upgradeTarget is a build a roll goes onto, by its name in the report.
type upgradeTarget struct {
	name  string
	build *imagemanifest.Build
}

// upgradeV2Dir is where make upgrade-images writes the v2 build: beside
// out, named after it.
func upgradeV2Dir(out string) string { return filepath.Clean(out) + "-upgrade-v2" }

// upgradeTargets are the builds the three rolls go onto, in turn: v2,
// out's own build (v1) and v2 again, so every roll changes the node's
// kiln and the node never sits on a slot the rollout would skip.
func upgradeTargets(out string) ([]upgradeTarget, error) {
	dir := upgradeV2Dir(out)
	if _, err := os.Stat(imagemanifest.Path(dir)); err != nil {
		return nil, fmt.Errorf("the upgrade part rolls the node between %s and the build beside it in %s, which has no %s: run make upgrade-images (with OUT=%s) first: %w",
			out, dir, filepath.Base(imagemanifest.Path(dir)), out, err)
	}
	v1, err := imagemanifest.Open(out)
	if err != nil {
		return nil, fmt.Errorf("the image the upgrade part boots: %w", err)
	}
	v2, err := imagemanifest.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("the upgrade part's v2 build (make upgrade-images writes it): %w", err)
	}
	if v1.Versions.KilnSHA256 == v2.Versions.KilnSHA256 {
		return nil, fmt.Errorf("%s and %s carry the same kiln (sha256:%.12s), so kiln upgrade would skip the node: run make upgrade-images again", out, dir, v1.Versions.KilnSHA256)
	}
	a, b := upgradeTarget{"v2", v2}, upgradeTarget{"v1", v1}
	return []upgradeTarget{a, b, a}, nil
}

// upgradeTopology is the part's site: m1, a genesis node alone on the
// namespace's bridge, as the QEMU upgrade scenario's.
func upgradeTopology() cluster.Topology {
	return cluster.Topology{Machines: []cluster.Machine{{Name: "m1", Role: nodefile.RoleGenesis, MAC: cluster.M1MAC, Addr: cluster.M1Addr,
		CPUs: upgradeCPUs, MemoryMiB: upgradeMemMiB}}}
}

// benchUpgrade times kiln upgrade on one node: its staging and its
// reboot to the health gate, beside a plain boot of the same image. The
// floor is two plain boots of node.raw, the faster taken. Then a genesis node boots from a copy of node.raw (UEFI, root
// slots a and b) on a bridge in a network namespace, and kiln upgrade,
// run inside the namespace as an operator runs it, rolls it three times,
// onto v2, v1 and v2 (upgradeTargets); each roll is timed from the
// command's start to the node's staged answer, from there to the new
// slot's health gate on the console and to the command's exit. The part
// reports each figure's median and spread. Whatever happens, the VM is
// powered off, the namespace removed and the consoles and kiln upgrade's
// output kept in the image's bench-logs/upgrade.
func benchUpgrade(ctx context.Context, o options, work string, r *report) (err error) {
	targets, err := upgradeTargets(o.out)
	if err != nil {
		return err
	}
	dir, logs := filepath.Join(work, "upgrade"), filepath.Join(o.out, "bench-logs", "upgrade")
	for _, d := range []string{dir, logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	defer keepConsoles(dir, logs) // the work directory goes when the bench ends
	floor, err := fasterPlainBoot(ctx, o, dir, "upgrade", bootPath{name: "raw disk", setup: withShape(rawBoot, upgradeMemMiB, upgradeCPUs)}, 2)
	if err != nil {
		return fmt.Errorf("upgrade floor: %w", err)
	}
	seg, err := netns.New(fmt.Sprintf("bu%d", os.Getpid()%100000), cluster.BridgeCIDR)
	if err != nil {
		return fmt.Errorf("upgrade namespace: %w", err)
	}
	defer func() {
		upgradeLog("removing namespace %s", seg.Name)
		if cerr := seg.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("removing namespace %s: %w", seg.Name, cerr))
		}
	}()
	u := &upgradeRun{o: o, seg: seg, dir: dir, logs: logs, slot: "a"}
	defer u.powerOff() // before the namespace goes: QEMU runs inside it
	first, err := u.bootstrap(ctx)
	if err != nil {
		return err
	}
	var rolls []roll
	for i, t := range targets {
		x, err := u.rollOnto(ctx, i+1, len(targets), t)
		if err != nil {
			return err
		}
		rolls = append(rolls, x)
	}
	r.add(upgradeTitle, upgradeHead, upgradeRows(rolls, floor.took)...)
	mid := medianRoll(rolls)
	r.addTimeline("upgrade", upgradeTimeline,
		floorRow("plain boot of the same disk, agent masked", floor.console),
		stepsRow("first boot: bootstrap on slot a", first),
		stepsRow(fmt.Sprintf("trying boot of slot %s onto %s (roll %d of %d, the median reboot to gate)", mid.slot, mid.onto, mid.n, len(rolls)), mid.console))
	return nil
}

// upgradeRun is the upgrade part's node and what its rolls need.
type upgradeRun struct {
	o             options
	seg           *netns.Net
	dir, logs     string
	siteFile, pki string
	node          *vm.VM
	slot          string // the slot the node runs
}

// bootstrap writes the site and its PKI, boots m1 from a copy of
// node.raw with its config, waits for its role's bootstrapped line and
// its Node Ready, and returns the boot's console.
func (u *upgradeRun) bootstrap(ctx context.Context) ([]console.Line, error) {
	tp := upgradeTopology()
	m := tp.Machines[0]
	u.siteFile, u.pki = filepath.Join(u.dir, "site.yaml"), filepath.Join(u.dir, "pki")
	if err := os.WriteFile(u.siteFile, []byte(tp.Site()), 0o600); err != nil {
		return nil, err
	}
	cfgs, err := cluster.Configs(tp.Site(), u.pki)
	if err != nil {
		return nil, fmt.Errorf("upgrade site configs: %w", err)
	}
	admin, err := cluster.AdminKubeconfig(tp.Site(), u.pki)
	if err != nil {
		return nil, fmt.Errorf("upgrade admin kubeconfig: %w", err)
	}
	kube, err := cluster.FailoverClient(admin, []string{m.IP()}, u.seg.DialContext, upgradeLog)
	if err != nil {
		return nil, err
	}
	disk := filepath.Join(u.dir, m.Name+".raw")
	if err := copyDisk(filepath.Join(u.o.out, "node.raw"), disk, "8G"); err != nil {
		return nil, err
	}
	tap := "tap-" + m.Name
	if err := u.seg.AddTap(tap); err != nil {
		return nil, err
	}
	u.node, err = vm.Start(vm.Config{Name: m.Name, Dir: filepath.Join(u.dir, m.Name), Firmware: vm.UEFI, Boot: vm.BootDisk,
		MemoryMiB: m.MemoryMiB, CPUs: m.CPUs, KVM: vm.KVMUsable(), MAC: m.MAC, Disks: []vm.Disk{{Path: disk, Format: "raw"}},
		Netns: u.seg.Name, Tap: tap, Ignition: cfgs[m.Name]})
	if err != nil {
		return nil, err
	}
	upgradeLog("m1 powered on from a copy of node.raw (UEFI): waiting up to %s for `done role=genesis (bootstrapped` (console: %s)",
		clusterBoot, u.node.ConsolePath(u.node.Boot()))
	if _, err := cluster.WaitRoleDone(ctx, u.node, m.Role, "bootstrapped", clusterBoot); err != nil {
		return nil, u.consoleErr(err)
	}
	what := "Node m1 Ready"
	upgradeLog("waiting up to %s for %s", clusterSettle, what)
	if err := retry.Wait(ctx, what, clusterSettle, upgradeLog, func(ctx context.Context) error {
		return clustercheck.NodeReady(ctx, kube, m.Name, time.Time{})
	}); err != nil {
		return nil, err
	}
	return u.node.Console(), nil
}

// rollOnto rolls the node onto t with kiln upgrade (roll n of total) and
// times it; the node then runs t from the slot it did not run.
func (u *upgradeRun) rollOnto(ctx context.Context, n, total int, t upgradeTarget) (roll, error) {
	next := otherSlot(u.slot)
	x := roll{n: n, onto: t.name, slot: next}
	fail := func(err error) (roll, error) {
		return x, fmt.Errorf("upgrade roll %d of %d, onto %s (slot %s): %w", n, total, t.name, next, err)
	}
	upgradeLog("roll %d of %d: kiln upgrade onto %s (%s), into slot %s", n, total, t.name, t.build.Dir, next)
	on := poweredOn(u.node)
	x.start = time.Now()
	ro, err := startRollout(ctx, u.seg, abs(u.o.kiln), u.siteFile, u.pki, abs(t.build.Dir))
	if err != nil {
		return fail(err)
	}
	defer func() {
		ro.stop()
		u.keepOutput(n, t.name, ro)
	}()
	staged, err := u.waitConsole(ctx, rebootingLine(next), upgradeStageBound, ro, ro.ending(false))
	if err != nil {
		return fail(fmt.Errorf("the staged answer: %w", err))
	}
	x.staged = on.Add(staged.At)
	if l, ok := firstLine(u.node.Console(), stagedLine(next)); ok {
		x.nodeStage = stagedLine(next).FindStringSubmatch(l.Text)[1]
	}
	if err := u.reboot(ctx, ro, next); err != nil {
		return fail(err)
	}
	gate, err := u.waitConsole(ctx, gateLine(next), upgradeGateBound, ro, ro.ending(true))
	if err != nil {
		return fail(fmt.Errorf("the new slot's health gate: %w", err))
	}
	x.gate, x.tryingGate = poweredOn(u.node).Add(gate.At), gate.At
	upgradeLog("m1: %s (%.1f s after the trying boot's power-on)", gate.Text, gate.At.Seconds())
	if err := ro.wait(ctx, upgradeEndBound); err != nil {
		return fail(err)
	}
	x.end, x.console = ro.at, u.node.Console()
	u.slot = next
	upgradeLog("roll %d of %d onto %s: staging %s, reboot to gate %s, reboot to the rollout's end %s", n, total, t.name,
		secs(x.staging()), secs(x.rebootToGate()), secs(x.rebootToEnd()))
	return x, nil
}

// reboot waits for the staged node's guest to reboot (QEMU runs with
// -no-reboot: it exits), powers it on again, its disk and config as they
// are, and waits for the trying boot of slot.
func (u *upgradeRun) reboot(ctx context.Context, ro *rollout, slot string) error {
	upgradeLog("waiting up to %s for m1 to reboot (QEMU exits)", upgradeDownBound)
	if err := u.node.WaitExit(upgradeDownBound); err != nil {
		return u.consoleErr(err)
	}
	if err := u.node.Restart(); err != nil {
		return fmt.Errorf("m1: powering on after the reboot: %w", err)
	}
	_, err := u.waitConsole(ctx, tryingLine(slot), upgradeTryBound, ro, ro.ending(true))
	return err
}

// The node's console lines a roll is timed by, for the slot it rolls
// into: the upgrade service's staged line (its own time to fetch and
// write, captured) and its answer, after which it reboots; the trying
// boot's first word on the slot; the verdict on it.
func stagedLine(slot string) *regexp.Regexp {
	return regexp.MustCompile(`upgrade: request \S+: staged \S+ on slot ` + slot + ` in (\S+)`)
}

func rebootingLine(slot string) *regexp.Regexp {
	return regexp.MustCompile(`upgrade: request \S+: rebooting to try slot ` + slot + ` once`)
}

func tryingLine(slot string) *regexp.Regexp {
	return regexp.MustCompile(`kiln-firstboot: slot ` + slot + `: trying its image once`)
}

func gateLine(slot string) *regexp.Regexp {
	return regexp.MustCompile(`kiln-firstboot: kiln: slot ` + slot + ` \(\S+\) passed the health gate and is now the active slot`)
}

func otherSlot(s string) string {
	if s == "a" {
		return "b"
	}
	return "a"
}

// waitConsole waits within bound for a whole line matching re on the
// node's current boot and returns it with its time since power-on. It
// gives up when abort is closed: the rollout ended, and with it what the
// node was waiting for.
func (u *upgradeRun) waitConsole(ctx context.Context, re *regexp.Regexp, bound time.Duration, ro *rollout, abort <-chan struct{}) (console.Line, error) {
	upgradeLog("waiting up to %s for m1's console to show %q (%s)", bound, re, u.node.ConsolePath(u.node.Boot()))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-abort:
			cancel()
		case <-wctx.Done():
		}
	}()
	_, err := u.node.WaitWholeLine(wctx, re, bound)
	if l, ok := firstLine(u.node.Console(), re); ok {
		return l, nil
	}
	switch {
	case ctx.Err() != nil:
		return console.Line{}, ctx.Err()
	case err == nil:
		return console.Line{}, u.consoleErr(fmt.Errorf("m1's console file showed %q, but its recorded lines lack it", re))
	case wctx.Err() != nil:
		return console.Line{}, fmt.Errorf("kiln upgrade exited (%v) before m1's console showed %q; its output:\n%s", ro.err, re, lastLines(ro.output(), 30))
	}
	return console.Line{}, u.consoleErr(fmt.Errorf("%w; kiln upgrade's output so far:\n%s", err, lastLines(ro.output(), 30)))
}

// consoleErr adds the node's console file and its last lines to err.
func (u *upgradeRun) consoleErr(err error) error {
	return fmt.Errorf("%w (console: %s; its last lines:\n%s)", err, u.node.ConsolePath(u.node.Boot()), u.node.Tail(30))
}

// keepOutput writes roll n's kiln upgrade output into the logs.
func (u *upgradeRun) keepOutput(n int, onto string, ro *rollout) {
	path := filepath.Join(u.logs, fmt.Sprintf("roll-%d-%s-kiln-upgrade.log", n, onto))
	if err := os.WriteFile(path, []byte(ro.output()), 0o644); err != nil {
		upgradeLog("keeping kiln upgrade's output: %v", err)
	}
}

// powerOff kills the node's VM if it runs.
func (u *upgradeRun) powerOff() {
	if u.node != nil {
		u.node.PowerCut()
		upgradeLog("m1 powered off")
	}
}

// firstLine is the first of lines matching re.
func firstLine(lines []console.Line, re *regexp.Regexp) (console.Line, bool) {
	i := slices.IndexFunc(lines, func(l console.Line) bool { return re.MatchString(l.Text) })
	if i < 0 {
		return console.Line{}, false
	}
	return lines[i], true
}

// lastLines is the last n lines of text, for an error message.
func lastLines(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// rollout is one kiln upgrade running inside the namespace, its output
// kept.
type rollout struct {
	mu     sync.Mutex
	out    bytes.Buffer
	cancel context.CancelFunc
	exited chan struct{} // closed once it exited, err and at set
	err    error
	at     time.Time
}

// startRollout runs kiln upgrade onto the build in image as the QEMU
// upgrade scenario does: the build's artifacts served on the bridge's
// gateway for the rollout's length, the site's one master rolled with
// its outage accepted.
func startRollout(ctx context.Context, seg *netns.Net, kiln, siteFile, pki, image string) (*rollout, error) {
	ctx, cancel := context.WithCancel(ctx)
	ro := &rollout{cancel: cancel, exited: make(chan struct{})}
	cmd := seg.Command(ctx, kiln, "upgrade", "-f", siteFile, "--pki", pki, "--image", image, "--serve", cluster.Gateway+":0", "--accept-outage")
	cmd.Stdout, cmd.Stderr = ro, ro
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("starting kiln upgrade: %w", err)
	}
	go func() {
		err := cmd.Wait()
		ro.err, ro.at = err, time.Now()
		close(ro.exited)
	}()
	return ro, nil
}

func (ro *rollout) Write(p []byte) (int, error) {
	ro.mu.Lock()
	defer ro.mu.Unlock()
	return ro.out.Write(p)
}

func (ro *rollout) output() string {
	ro.mu.Lock()
	defer ro.mu.Unlock()
	return ro.out.String()
}

// ending is closed when the rollout exits; with failed, only when it
// exits with an error (a rollout that succeeded may end before the
// node's console shows its own verdict).
func (ro *rollout) ending(failed bool) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		<-ro.exited
		if !failed || ro.err != nil {
			close(ch)
		}
	}()
	return ch
}

// wait waits within bound for the rollout to exit, and fails unless it
// exited 0 saying every node runs the target.
func (ro *rollout) wait(ctx context.Context, bound time.Duration) error {
	upgradeLog("waiting up to %s for kiln upgrade to exit with %q", bound, rolloutDone)
	select {
	case <-ro.exited:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(bound):
		return fmt.Errorf("kiln upgrade still running %s after the node passed its health gate; its output:\n%s", bound, lastLines(ro.output(), 30))
	}
	switch {
	case ro.err != nil:
		return fmt.Errorf("kiln upgrade: %w; its output:\n%s", ro.err, lastLines(ro.output(), 30))
	case !strings.Contains(ro.output(), rolloutDone):
		return fmt.Errorf("kiln upgrade exited 0 without %q; its output:\n%s", rolloutDone, lastLines(ro.output(), 30))
	}
	return nil
}

// stop ends the rollout if it still runs and waits for its exit.
func (ro *rollout) stop() {
	ro.cancel()
	<-ro.exited
}

// roll is one timed roll of the node onto a build. Its instants are the
// host's clock: a console line's is its boot's power-on plus the line's
// time on the console.
type roll struct {
	n          int
	onto, slot string
	// start: kiln upgrade started; staged: the node's answer (its
	// rebooting line); gate: the new slot's health gate line; end: kiln
	// upgrade exited.
	start, staged, gate, end time.Time
	tryingGate               time.Duration  // the gate line since the trying boot's power-on
	nodeStage                string         // the node's own fetch and write, as its staged line says
	console                  []console.Line // the trying boot's
}

func (x roll) staging() time.Duration      { return x.staged.Sub(x.start) }
func (x roll) rebootToGate() time.Duration { return x.gate.Sub(x.staged) }
func (x roll) tryingBoot() time.Duration   { return x.tryingGate }
func (x roll) rebootToEnd() time.Duration  { return x.end.Sub(x.staged) }
func (x roll) startToEnd() time.Duration   { return x.end.Sub(x.start) }

// upgradeRows are the part's figures, each the median of the rolls
// beside the floor.
func upgradeRows(rolls []roll, floor time.Duration) []row {
	var stages []string
	for _, x := range rolls {
		stages = append(stages, cmp.Or(x.nodeStage, "not printed"))
	}
	return []row{
		rollRow("**staging**: `kiln upgrade` start to the node's staged answer (`rebooting to try slot`)", rolls, roll.staging, floor,
			"the plan, the node's upgrade service seeing the ask, its fetch, write and read-back of the build (by its own count: "+strings.Join(stages, ", ")+")"),
		rollRow("**reboot to gate**: the staged answer to `passed the health gate and is now the active slot`", rolls, roll.rebootToGate, floor,
			"the old boot's shutdown, OVMF, GRUB trying the new slot, the boot and its role to the slot marked good"),
		rollRow("trying boot: power-on to `passed the health gate`", rolls, roll.tryingBoot, floor, ""),
		rollRow("reboot to the rollout's end: the staged answer to `kiln upgrade` exit 0", rolls, roll.rebootToEnd, floor,
			"the rollout polls its own health gate: the Node Ready on the new boot and the role done, etcd and the apiserver"),
		rollRow("rollout: `kiln upgrade` start to exit 0", rolls, roll.startToEnd, floor, ""),
	}
}

// rollRow is one figure's median over the rolls beside the floor; the
// note gives each roll's figure, in the order they ran, and the spread.
func rollRow(what string, rolls []roll, figure func(roll) time.Duration, floor time.Duration, note string) row {
	var all []time.Duration
	var each []string
	for _, x := range rolls {
		all = append(all, figure(x))
		each = append(each, x.onto+" "+secs(figure(x)))
	}
	mid, lo, hi := medianSpread(all)
	text := fmt.Sprintf("median of %d rolls (%s), spread %.1f–%.1f s", len(rolls), strings.Join(each, ", "), lo.Seconds(), hi.Seconds())
	if note != "" {
		text += "; " + note
	}
	return ratioRow(what, mid, floor, 0, text)
}

// medianRoll is the roll whose reboot to gate is the median (the lower
// middle one of an even count; ties keep the order they ran).
func medianRoll(rolls []roll) roll {
	sorted := slices.Clone(rolls)
	slices.SortStableFunc(sorted, func(a, b roll) int { return cmp.Compare(a.rebootToGate(), b.rebootToGate()) })
	return sorted[(len(sorted)-1)/2]
}

func upgradeLog(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "== upgrade: "+format+"\n", args...)
}
