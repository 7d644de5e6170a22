package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/qemu-tests/timeline"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

// row is one measured figure beside its floor.
type row struct {
	what, value, floor, note string
}

type report struct {
	started  time.Time
	sections []section
}

// section is a table of figures, or a part's timeline: its chart drawn
// to timeline-<part>.svg beside the results, its step times as a table.
type section struct {
	title string
	head  [3]string
	rows  []row
	part  string
	chart *timeline.Chart
}

func (r *report) add(title string, head [3]string, rows ...row) {
	for i := range r.sections {
		if r.sections[i].title == title && r.sections[i].chart == nil {
			r.sections[i].rows = append(r.sections[i].rows, rows...)
			return
		}
	}
	r.sections = append(r.sections, section{title: title, head: head, rows: rows})
}

// addTimeline adds rows to part's timeline, made with the first rows.
func (r *report) addTimeline(part, title string, rows ...timeline.Row) {
	for i := range r.sections {
		if r.sections[i].part == part {
			r.sections[i].chart.Rows = append(r.sections[i].chart.Rows, rows...)
			return
		}
	}
	note := fmt.Sprintf("Measured %s by make bench. Seconds since power-on, when the bench read the step's console line; a bar runs from the step before.",
		r.started.UTC().Format("2006-01-02 15:04 MST"))
	chart := &timeline.Chart{Title: title, Note: note, Steps: timeline.Steps(), Rows: rows}
	r.sections = append(r.sections, section{title: title, part: part, chart: chart})
}

// timelineFile is where part's chart is drawn, beside the results.
func timelineFile(part string) string { return "timeline-" + part + ".svg" }

// write writes the results and, beside them, every part's timeline.
func (r *report) write(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	for _, s := range r.sections {
		if s.chart == nil {
			continue
		}
		svg := filepath.Join(filepath.Dir(path), timelineFile(s.part))
		if err := atomicfile.WriteFile(svg, s.chart.SVG(), 0o644, nil); err != nil {
			return fmt.Errorf("the %s timeline: %w", s.part, err)
		}
	}
	return atomicfile.WriteFile(path, []byte(r.markdown()), 0o644, nil)
}

// timelineText says what a timeline's times are.
const timelineText = "Each step's time since power-on: when the bench first read the step's line on the serial console " +
	"(every 0.1 s, as the VM ran). A bar runs from the step before to the step's own line; a step a boot did not print " +
	"is left out. Floor rows are the plain boot the part's figures are beside (agent masked, to the login prompt).\n\n"

func (r *report) markdown() string {
	var b strings.Builder
	accel := "TCG"
	switch {
	case os.Getenv("KILN_ACCEL") != "":
		accel += " (KILN_ACCEL=" + os.Getenv("KILN_ACCEL") + ")"
	case vm.KVMUsable():
		accel = "KVM"
	}
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# kiln benchmark results\n\nMeasured %s on %s: %d CPUs, QEMU under %s. Written by `make bench` (qemu-tests/cmd/kiln-bench).\n",
		r.started.UTC().Format("2006-01-02 15:04 MST"), host, runtime.NumCPU(), accel)
	for _, s := range r.sections {
		fmt.Fprintf(&b, "\n## %s\n\n", s.title)
		if s.chart != nil {
			fmt.Fprintf(&b, "![%s](%s)\n\n%s%s", s.title, timelineFile(s.part), timelineText, s.chart.Table())
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | note |\n| --- | --- | --- | --- |\n", s.head[0], s.head[1], s.head[2])
		for _, x := range s.rows {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", x.what, x.value, x.floor, x.note)
		}
	}
	return b.String()
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// ratioRow is a figure beside its floor, with its ratio to the floor and,
// for goal > 0, whether it is within goal times the floor.
func ratioRow(what string, d, floor time.Duration, goal float64, note string) row {
	ratio := d.Seconds() / floor.Seconds()
	text := fmt.Sprintf("%.2f× the floor", ratio)
	if goal > 0 {
		verdict := "met"
		if ratio > goal {
			verdict = "**not met**"
		}
		text += fmt.Sprintf("; goal ≤ %g×: %s", goal, verdict)
	}
	if note != "" {
		text += "; " + note
	}
	return row{what, secs(d), secs(floor), text}
}

// medianSpread is the median of ds (the lower middle one of an even
// count) and its least and greatest; zero for none.
func medianSpread(ds []time.Duration) (mid, lo, hi time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	return sorted[(len(sorted)-1)/2], sorted[0], sorted[len(sorted)-1]
}

func mib(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// setFloor fills the empty floor cells of a section.
func (r *report) setFloor(title, floor string) {
	for i := range r.sections {
		if r.sections[i].title != title {
			continue
		}
		for j := range r.sections[i].rows {
			if x := &r.sections[i].rows[j]; x.floor == "" || strings.HasPrefix(x.floor, "see ") {
				x.floor = floor
			}
		}
	}
}
