package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/kiln-project/kiln/internal/atomicfile"
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

type section struct {
	title string
	head  [3]string
	rows  []row
}

func (r *report) add(title string, head [3]string, rows ...row) {
	for i := range r.sections {
		if r.sections[i].title == title {
			r.sections[i].rows = append(r.sections[i].rows, rows...)
			return
		}
	}
	r.sections = append(r.sections, section{title: title, head: head, rows: rows})
}

func (r *report) write(path string) error {
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
		fmt.Fprintf(&b, "\n## %s\n\n| %s | %s | %s | note |\n| --- | --- | --- | --- |\n", s.title, s.head[0], s.head[1], s.head[2])
		for _, x := range s.rows {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", x.what, x.value, x.floor, x.note)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, []byte(b.String()), 0o644, nil)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

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
