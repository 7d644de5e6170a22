package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
	"github.com/kiln-project/kiln/qemu-tests/console"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

var genesisDone = regexp.MustCompile(`kiln-firstboot: done role=genesis`)

// genesisEnd is the genesis agent's last line, done or failed: a role that
// gave up does not leave the bench waiting out its bound.
var genesisEnd = regexp.MustCompile(`kiln-firstboot: (done role=genesis|error: )`)

// Issue 14's goals, as multiples of the plain boot: the node Ready on its
// first boot, and again after a power cut.
const (
	goalGenesisReady    = 4.0
	goalGenesisRestored = 2.5
)

// benchGenesis times a genesis boot of the ISO (its kernel booted
// directly, vm.Config.Direct; state on a
// blank disk) from power-on to the apiserver healthy and to the node
// Ready, as the host sees them through hostfwd; then pulls the plug and
// times power-on to Ready again with no config attached. The floor is
// the same ISO's plain boot to the login prompt, measured here too.
func benchGenesis(ctx context.Context, o options, work string, r *report) error {
	dir := filepath.Join(work, "genesis")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	floor, err := fasterPlainBoot(ctx, o, dir, "genesis", bootPath{name: "ISO", setup: scenarioPlain}, 2)
	if err != nil {
		return fmt.Errorf("genesis floor: %w", err)
	}
	cfgs, err := cluster.Configs(cluster.GenesisSiteTimed(o.genesisTiming), filepath.Join(dir, "pki"))
	if err != nil {
		return err
	}
	disk := filepath.Join(dir, "state.qcow2")
	if err := createQcow2(disk, "8G"); err != nil {
		return fmt.Errorf("genesis state disk: %w", err)
	}
	port, err := cluster.FreePort()
	if err != nil {
		return err
	}
	v, err := vm.Start(vm.Config{Name: "genesis", Dir: dir, Firmware: vm.BIOS, Boot: vm.BootISO, Direct: true, MemoryMiB: 3072, CPUs: 2,
		KVM: vm.KVMUsable(), MAC: cluster.GenesisMAC, ISO: abs(filepath.Join(o.out, "node.iso")),
		Disks:   []vm.Disk{{Path: disk, Format: "qcow2"}},
		HostFwd: []string{fmt.Sprintf("tcp:127.0.0.1:%d-10.0.2.50:6443", port)}, Ignition: cfgs["g1"]})
	if err != nil {
		return err
	}
	defer v.PowerCut()
	kube, err := cluster.HostClient(cfgs["g1"], port)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "== genesis: first boot")
	healthy, ready, err := timeToReady(ctx, v, kube, time.Time{})
	if err != nil {
		return err
	}
	if err := waitGenesisEnd(ctx, v, o.genesisTiming); err != nil {
		return err
	}
	done, first := v.Uptime(), v.Console()
	head := [3]string{"step", "time", "floor: the faster of two plain boots of the same ISO to the login prompt"}
	title := "Genesis (the ISO's kernel booted directly, 3 GiB, 2 vCPUs, TCG, `norandmaps`, `timing: " + o.genesisTiming + "`; host polls the apiserver through hostfwd every second)"
	r.add(title, head,
		row{"power-on to apiserver healthy (/readyz ok)", secs(healthy), secs(floor.took), ""},
		ratioRow("power-on to node Ready", ready, floor.took, goalGenesisReady, ""),
		row{"power-on to `done role=genesis` (add-ons applied, validation pod read back)", secs(done), secs(floor.took), ""})
	logs := filepath.Join(o.out, "bench-logs", "genesis")
	cuts, err := genesisPowerCuts(ctx, o.restores, v, kube, logs)
	if err != nil {
		return err
	}
	mid := medianCut(cuts)
	r.add(title, head,
		row{"power cut: power-on to apiserver healthy", secs(median(cuts, healthyOf)), secs(floor.took), "no config attached: the state partition's copy; " + cutsNote(cuts, healthyOf)},
		ratioRow("power cut: power-on to node Ready again", mid.ready, floor.took, goalGenesisRestored,
			"Ready from this boot's kubelet heartbeat; "+cutsNote(cuts, readyOf)))
	r.addTimeline("genesis", "Genesis timeline (the ISO's kernel booted directly, 3 GiB, 2 vCPUs)",
		floorRow("plain boot of the same ISO, agent masked", floor.console),
		stepsRow("first boot: bootstrap (config attached, blank disk)", first),
		stepsRow(fmt.Sprintf("after a power cut: restored (no config; cut %d of %d, the median)", mid.n, len(cuts)), mid.console))
	keepConsoles(dir, logs)
	v.PowerCut()
	journals := map[int]string{}
	for _, c := range cuts {
		// The last boot is -0, the one before it -1, ...
		journals[c.n-len(cuts)] = filepath.Join(logs, fmt.Sprintf("restored-%d-journal.log", c.n))
	}
	keepJournal(ctx, disk, journals)
	return nil
}

// waitGenesisEnd waits for the genesis role's last line and fails with
// it when the role gave up.
func waitGenesisEnd(ctx context.Context, v *vm.VM, timing string) error {
	line, err := v.WaitLine(ctx, genesisEnd, 30*time.Minute)
	switch {
	case err != nil:
		return fmt.Errorf("genesis: %w (console: %s)", err, v.ConsolePath(v.Boot()))
	case !genesisDone.MatchString(line):
		hint := ""
		if timing == site.TimingDefault {
			hint = "; on a slow host, try TIMING=slow make bench (-genesis-timing slow)"
		}
		return fmt.Errorf("genesis: the role failed: %s (console: %s)%s", strings.TrimSpace(line), v.ConsolePath(v.Boot()), hint)
	}
	return nil
}

// restore is one power cut of the genesis node and the boot after it.
type restore struct {
	n              int // 1 for the first cut
	healthy, ready time.Duration
	console        []console.Line
}

// genesisPowerCuts pulls the plug of the running genesis VM n times in a
// row, each time booting it again with no config attached and timing
// power-on to the apiserver healthy and to the node Ready from a
// heartbeat of that boot; each boot runs until its role says done, so
// the next cut finds a settled node. One boot's figure varies by a few
// seconds with where the kubelet's registration retries fall against the
// apiserver's start, so the part reports the median of n. The apiserver's
// and etcd's logs of each boot go into logs.
func genesisPowerCuts(ctx context.Context, n int, v *vm.VM, kube kubernetes.Interface, logs string) ([]restore, error) {
	n = max(n, 1)
	var cuts []restore
	for i := 1; i <= n; i++ {
		fmt.Fprintf(os.Stderr, "== genesis: power cut %d of %d and boot with no config\n", i, n)
		v.PowerCut()
		v.Ignition = nil
		since := time.Now()
		if err := v.Restart(); err != nil {
			return nil, err
		}
		healthy, ready, err := timeToReady(ctx, v, kube, since)
		if err != nil {
			return nil, fmt.Errorf("after power cut %d: %w", i, err)
		}
		cuts = append(cuts, restore{n: i, healthy: healthy, ready: ready, console: restoredConsole(ctx, v)})
		keepPodLogs(ctx, kube, logs, fmt.Sprintf("restored-%d-", i), "kube-apiserver-g1", "etcd-g1")
	}
	return cuts, nil
}

// medianCut is the restore whose time to Ready is the median (the lower
// middle one of an even count).
func medianCut(cuts []restore) restore {
	sorted := slices.Clone(cuts)
	slices.SortStableFunc(sorted, func(a, b restore) int { return cmp.Compare(readyOf(a), readyOf(b)) })
	return sorted[(len(sorted)-1)/2]
}

// median is the median of one figure of the cuts (the lower middle one
// of an even count); the cut whose Ready is the median (medianCut) need
// not be the one whose apiserver was healthy in the median time.
func median(cuts []restore, figure func(restore) time.Duration) time.Duration {
	var all []time.Duration
	for _, c := range cuts {
		all = append(all, figure(c))
	}
	mid, _, _ := medianSpread(all)
	return mid
}

func healthyOf(c restore) time.Duration { return c.healthy }
func readyOf(c restore) time.Duration   { return c.ready }

// cutsNote lists every cut's figure, in the order they ran.
func cutsNote(cuts []restore, figure func(restore) time.Duration) string {
	if len(cuts) == 1 {
		return "one power cut"
	}
	var each []string
	for _, c := range cuts {
		each = append(each, secs(figure(c)))
	}
	return fmt.Sprintf("median of %d power cuts in a row (%s)", len(cuts), strings.Join(each, ", "))
}

// keepJournal writes the journals of boots on a node's state disk
// (qcow2; a running node's as it stands), each to its path by
// journalctl's boot offset (0 the last boot, -1 the one before it), with
// monotonic times, so that
// where a boot's time went (the kubelet's start, containerd's) can be
// read beside its console. The disk is converted to a raw copy and each
// of its partitions mounted through a loop device at the
// partition's offset (partition nodes of a loop device need udev, which
// this host may not run) until one holds the state partition's
// log/journal; the copy goes at the end. Failures are reported and
// skipped: the figures are already taken.
func keepJournal(ctx context.Context, disk string, boots map[int]string) {
	fail := func(err error) { fmt.Fprintf(os.Stderr, "== keeping the journal of %s: %v\n", disk, err) }
	run := func(name string, args ...string) ([]byte, error) {
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
		}
		return out, nil
	}
	raw := disk + ".journal.raw"
	defer os.Remove(raw)
	mnt, err := os.MkdirTemp(filepath.Dir(disk), "journal-")
	if err != nil {
		fail(err)
		return
	}
	defer os.Remove(mnt)
	// -U: the disk of a running machine is read as it stands.
	if _, err := run("qemu-img", "convert", "-U", "-O", "raw", disk, raw); err != nil {
		fail(err)
		return
	}
	out, err := run("sfdisk", "--json", raw)
	if err != nil {
		fail(err)
		return
	}
	var table struct {
		PartitionTable struct {
			SectorSize int64 `json:"sectorsize"`
			Partitions []struct {
				Start int64 `json:"start"`
			} `json:"partitions"`
		} `json:"partitiontable"`
	}
	if err := json.Unmarshal(out, &table); err != nil {
		fail(fmt.Errorf("sfdisk --json: %w", err))
		return
	}
	sector := max(table.PartitionTable.SectorSize, 512)
	for _, p := range table.PartitionTable.Partitions {
		// Read-write: mounting replays the ext4 journal of the killed
		// guest, without which the files journald made this boot are not
		// there (the raw copy is the bench's own).
		opts := fmt.Sprintf("loop,offset=%d", p.Start*sector)
		if _, err := run("mount", "-t", "ext4", "-o", opts, raw, mnt); err != nil {
			continue
		}
		journal := filepath.Join(mnt, "log", "journal")
		if _, err := os.Stat(journal); err != nil {
			run("umount", mnt)
			continue
		}
		for offset, path := range boots {
			out, err := run("journalctl", "-D", journal, "-b", strconv.Itoa(offset), "-o", "short-monotonic", "--no-pager")
			if err == nil {
				err = os.WriteFile(path, out, 0o644)
			}
			if err != nil {
				fail(err)
			}
		}
		run("umount", mnt)
		return
	}
	fail(fmt.Errorf("none of its %d partitions holds a log/journal directory", len(table.PartitionTable.Partitions)))
}

// keepConsoles copies the serial consoles of the part's boots (every
// .log under dir: the floors' and the node's) into logs, named by their
// path under dir, since the bench's work directory is removed at its end.
func keepConsoles(dir, logs string) {
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".log" {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(logs, strings.ReplaceAll(rel, string(filepath.Separator), "-")), data, 0o644)
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "== keeping the consoles: %v\n", err)
	}
}

// keepPodLogs writes the named kube-system pods' logs, as the apiserver
// serves them, and the pods themselves (their status holds when the
// sandbox was ready and when each container started) into dir (prefix
// before each name), so that where a boot's time went can be read after
// the VM is gone. What cannot be read is reported and skipped: the
// figures are already taken.
func keepPodLogs(ctx context.Context, kube kubernetes.Interface, dir, prefix string, pods ...string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "== keeping pod logs: %v\n", err)
		return
	}
	for _, pod := range pods {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		data, err := kube.CoreV1().Pods("kube-system").GetLogs(pod, &corev1.PodLogOptions{Timestamps: true}).DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, prefix+pod+".log"), data, 0o644)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "== keeping %s's log: %v\n", pod, err)
		}
		if err := keepPod(ctx, kube, filepath.Join(dir, prefix+pod+".pod.json"), pod); err != nil {
			fmt.Fprintf(os.Stderr, "== keeping pod %s: %v\n", pod, err)
		}
		cancel()
	}
}

// keepPod writes the kube-system pod name, as the apiserver has it, to path.
func keepPod(ctx context.Context, kube kubernetes.Interface, path, name string) error {
	pod, err := kube.CoreV1().Pods("kube-system").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	pod.ManagedFields = nil
	data, err := json.MarshalIndent(pod, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// restoredConsole is the console of the genesis boot after the power
// cut, up to its role's done line: the bench's figures end at Ready,
// the timeline at the role's end. Without that line within a few
// minutes the timeline ends at the last step seen.
func restoredConsole(ctx context.Context, v *vm.VM) []console.Line {
	if _, err := v.WaitLine(ctx, genesisDone, 5*time.Minute); err != nil {
		fmt.Fprintf(os.Stderr, "== genesis: the timeline after the power cut ends at its last step: %v\n", err)
	}
	return v.Console()
}

// timeToReady polls from the host, every second, whether the apiserver
// is healthy (/readyz) and whether the node is Ready from a heartbeat of
// this boot, returning when each was first seen, since power-on. The two
// are polled side by side: the apiserver serves the kubelet's heartbeat
// before its last post-start hook lets /readyz pass. Each poll is cut
// after a few seconds, so that one sent before the guest's network was
// up does not hold the next for its TLS handshake's 10 s.
func timeToReady(ctx context.Context, v *vm.VM, kube kubernetes.Interface, since time.Time) (healthy, ready time.Duration, err error) {
	if !since.IsZero() {
		since = since.Add(-5 * time.Second)
	}
	check := func(f func(context.Context) error) error {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		return f(ctx)
	}
	pending := ""
	deadline := time.Now().Add(30 * time.Minute)
	for healthy == 0 || ready == 0 {
		if healthy == 0 {
			err := check(func(ctx context.Context) error { return clustercheck.APIServerReady(ctx, kube) })
			if err == nil {
				healthy = v.Uptime()
				fmt.Fprintf(os.Stderr, "== %.1f s: readyz ok\n", healthy.Seconds())
			} else if p := pendingChecks(err); p != pending {
				fmt.Fprintf(os.Stderr, "== %.1f s: readyz pending: %s\n", v.Uptime().Seconds(), p)
				pending = p
			}
		}
		if ready == 0 && check(func(ctx context.Context) error { return clustercheck.NodeReady(ctx, kube, "g1", since) }) == nil {
			ready = v.Uptime()
			fmt.Fprintf(os.Stderr, "== %.1f s: node Ready\n", ready.Seconds())
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("the apiserver healthy and the node Ready: not both after 30 min (console: %s)", v.ConsolePath(v.Boot()))
		}
		if ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
		time.Sleep(time.Second)
	}
	return healthy, ready, nil
}

// pendingChecks names the apiserver's readiness checks that a failed
// answer of /readyz says failed ("[-]name failed"), for the bench's log
// of where the apiserver's start goes; the error itself when none is
// named.
func pendingChecks(err error) string {
	var names []string
	for _, m := range failedCheck.FindAllStringSubmatch(err.Error(), -1) {
		names = append(names, m[1])
	}
	if len(names) == 0 {
		return retry.OneLine(err)
	}
	return strings.Join(names, " ")
}

var failedCheck = regexp.MustCompile(`\[-\](\S+) failed`)
