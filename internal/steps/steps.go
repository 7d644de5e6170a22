// Package steps owns running a list of named steps: in order, each one
// only when its RunIf says so, a Once step only until a stamp says it
// succeeded, with a step's error carrying the step's path and, for those
// who want it, progress as "[i/n] name" events. The build's pipeline,
// the node roles' phases and kiln node remove run their steps through it.
//
// It knows nothing of kiln: where stamps are kept, how progress is shown
// and how an error reads are its callers' (Stamps, Progress, Wrap).
package steps

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Step is one named step.
type Step struct {
	Name string
	// RunIf says whether the step runs this time; nil: always.
	RunIf func() bool
	// Once steps are stamped when they succeed and skipped once stamped
	// (with the Runner's Stamps; without, they run every time). Each
	// should be idempotent: a run cut short resumes from its first
	// unstamped step.
	Once bool
	Run  func(ctx context.Context) error
}

// Stamps keeps the Once steps' stamps, by step path.
type Stamps interface {
	Done(path string) bool
	Mark(path string) error
}

// Kind is what an Event says about a step.
type Kind int

const (
	Started Kind = iota
	Skipped      // its RunIf said no, or it is stamped
	Succeeded
	Failed
)

// Event is a step's progress.
type Event struct {
	Index, Total int // Index counts from 1
	Name         string
	Kind         Kind
	Err          error // the step's own error, for Failed
}

// Label is the step's "[i/n] name".
func (e Event) Label() string { return fmt.Sprintf("[%d/%d] %s", e.Index, e.Total, e.Name) }

// Runner runs step lists.
type Runner struct {
	// Parent is the steps' parent in their paths: "master" makes the
	// path of step "etcd-join" "master/etcd-join"; "" the name alone.
	Parent string
	// Stamps keeps the Once steps' stamps; nil: none.
	Stamps Stamps
	// Progress is told every step's events; nil: nobody.
	Progress func(Event)
	// Wrap wraps a step's error with its path; nil: "path: err".
	Wrap func(path string, err error) error
}

// PathOf is the path of the step named name.
func (r Runner) PathOf(name string) string {
	if r.Parent == "" {
		return name
	}
	return r.Parent + "/" + name
}

// AllDone reports whether every Once step of list is stamped (false
// without Stamps when list has a Once step).
func (r Runner) AllDone(list []Step) bool {
	for _, s := range list {
		if s.Once && (r.Stamps == nil || !r.Stamps.Done(r.PathOf(s.Name))) {
			return false
		}
	}
	return true
}

// Run runs list in order and stops at the first error, wrapped with the
// failed step's path ("path: stamping: err" when its stamp could not be
// written).
func (r Runner) Run(ctx context.Context, list []Step) error {
	for i, s := range list {
		path := r.PathOf(s.Name)
		ev := Event{Index: i + 1, Total: len(list), Name: s.Name}
		stamped := s.Once && r.Stamps != nil && r.Stamps.Done(path)
		if stamped || (s.RunIf != nil && !s.RunIf()) {
			r.report(ev, Skipped, nil)
			continue
		}
		r.report(ev, Started, nil)
		err := s.Run(ctx)
		if err == nil && s.Once && r.Stamps != nil {
			if err = r.Stamps.Mark(path); err != nil {
				err = fmt.Errorf("stamping: %w", err)
			}
		}
		if err != nil {
			r.report(ev, Failed, err)
			return r.wrap(path, err)
		}
		r.report(ev, Succeeded, nil)
	}
	return nil
}

func (r Runner) report(ev Event, k Kind, err error) {
	if r.Progress != nil {
		ev.Kind, ev.Err = k, err
		r.Progress(ev)
	}
}

func (r Runner) wrap(path string, err error) error {
	if r.Wrap != nil {
		return r.Wrap(path, err)
	}
	return fmt.Errorf("%s: %w", path, err)
}

// Lines is a Progress writing one line to w as each step starts and
// another as it ends, timed by now (nil: time.Now):
//
//	[1/13] base root filesystem ...
//	[1/13] base root filesystem: done in 1m2.3s
//	[4/13] components: skipped
//	[7/13] initramfs (dracut): failed after 0.4s
func Lines(w io.Writer, now func() time.Time) func(Event) {
	if now == nil {
		now = time.Now
	}
	var start time.Time
	since := func() string { return now().Sub(start).Round(100 * time.Millisecond).String() }
	return func(e Event) {
		switch e.Kind {
		case Started:
			fmt.Fprintf(w, "%s ...\n", e.Label())
			start = now()
		case Skipped:
			fmt.Fprintf(w, "%s: skipped\n", e.Label())
		case Succeeded:
			fmt.Fprintf(w, "%s: done in %s\n", e.Label(), since())
		case Failed:
			fmt.Fprintf(w, "%s: failed after %s\n", e.Label(), since())
		}
	}
}
