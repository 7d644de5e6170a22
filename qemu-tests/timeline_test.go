package qemutests

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

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

func bootName(name string, boot int) string { return fmt.Sprintf("%s boot %d", name, boot) }
