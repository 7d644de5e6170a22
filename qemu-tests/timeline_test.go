package qemutests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kiln-project/kiln/qemu-tests/cluster"
	"github.com/kiln-project/kiln/qemu-tests/timeline"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

// bootTimeline collects a scenario's boots, each as its steps read from
// the console, and when the test ends (pass or fail) logs their table and
// draws them to timeline.svg in the test's log directory: where the time
// of every scenario run went, not only of make bench's.
type bootTimeline struct {
	mu    sync.Mutex
	chart timeline.Chart
	// failed is the wait that failed the scenario, with the agent's last
	// lines: logged after the table, the last thing the test prints, so
	// the cause is in whatever tail of the output a CI report keeps.
	failed []string
}

func newBootTimeline(t *testing.T, dir, title string) *bootTimeline {
	bt := &bootTimeline{chart: timeline.Chart{Title: title, Steps: timeline.Steps(),
		Note: "seconds since each VM's power-on, from the serial console"}}
	t.Cleanup(func() {
		bt.mu.Lock()
		defer bt.mu.Unlock()
		if len(bt.chart.Rows) == 0 {
			return
		}
		t.Logf("timeline (%s):\n%s", title, bt.chart.Table())
		for _, f := range bt.failed {
			t.Logf("what failed: %s", f)
		}
		if err := os.WriteFile(filepath.Join(dir, "timeline.svg"), bt.chart.SVG(), 0o644); err != nil {
			t.Errorf("writing the timeline: %v", err)
		}
	})
	return bt
}

// add records v's current boot under name.
func (bt *bootTimeline) add(name string, v *vm.VM) {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	bt.chart.Rows = append(bt.chart.Rows, timeline.Row{Name: name, Marks: timeline.Extract(timeline.Steps(), v.Console())})
}

// roleDone waits for v's role to end as how (cluster.WaitRoleDone) and
// records the boot under name, whatever the wait's outcome; a failed wait
// fails the test.
func (bt *bootTimeline) roleDone(t *testing.T, name string, v *vm.VM, role, how string) string {
	t.Helper()
	line, err := cluster.WaitRoleDone(context.Background(), v, role, how, joinBoot)
	bt.add(name, v)
	if err != nil {
		bt.fail(v, err)
		// The failure recap prints the body's last lines: the agent's
		// own say what it waited for.
		t.Fatalf("%v\n%s boot %d, its last agent lines:\n%s", err, v.Name, v.Boot(), agentTail(v, 8))
	}
	return line
}

// fail records a failed wait on v: the error and the console's last
// lines from the agent and the roles.
func (bt *bootTimeline) fail(v *vm.VM, err error) {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	bt.failed = append(bt.failed, fmt.Sprintf("%v\n%s boot %d, its last agent lines:\n%s", err, v.Name, v.Boot(), agentTail(v, 15)))
}

// agentTail is the last n console lines of v's current boot that kiln's
// units printed (kiln-firstboot, kiln-images, kiln-seed, kiln-leave), or
// the kernel when it oopsed or panicked (kernel.panic_on_oops is set: the
// guest reboots, and QEMU, run with -no-reboot, exits).
func agentTail(v *vm.VM, n int) string {
	var kiln []string
	for _, l := range v.Lines() {
		if strings.Contains(l, "kiln-") || strings.Contains(l, "Kernel panic") || strings.Contains(l, "Oops") || strings.Contains(l, "BUG: ") {
			kiln = append(kiln, l)
		}
	}
	return strings.Join(kiln[max(0, len(kiln)-n):], "\n")
}

func bootName(name string, boot int) string { return fmt.Sprintf("%s boot %d", name, boot) }
