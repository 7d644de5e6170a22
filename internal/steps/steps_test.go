package steps

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// memStamps keeps stamps in memory; fail makes Mark fail.
type memStamps struct {
	done map[string]bool
	fail error
}

func (m *memStamps) Done(path string) bool { return m.done[path] }
func (m *memStamps) Mark(path string) error {
	if m.fail != nil {
		return m.fail
	}
	m.done[path] = true
	return nil
}

func TestRun(t *testing.T) {
	no := func() bool { return false }
	yes := func() bool { return true }
	for _, tc := range []struct {
		name      string
		runner    Runner
		steps     func(run func(string) func(context.Context) error) []Step
		stamped   []string // before the run
		markFails bool
		noStamps  bool   // the runner has no Stamps
		fail      string // the step whose Run fails
		wantRan   string
		wantErr   string
		wantMarks string // stamped after the run
	}{
		{
			name:   "in order",
			runner: Runner{},
			steps: func(run func(string) func(context.Context) error) []Step {
				return []Step{{Name: "a", Run: run("a")}, {Name: "b", Run: run("b")}, {Name: "c", Run: run("c")}}
			},
			wantRan: "a b c",
		},
		{
			name:   "run-if false skips",
			runner: Runner{},
			steps: func(run func(string) func(context.Context) error) []Step {
				return []Step{{Name: "a", RunIf: no, Run: run("a")}, {Name: "b", RunIf: yes, Run: run("b")}, {Name: "c", Run: run("c")}}
			},
			wantRan: "b c",
		},
		{
			name:   "once steps are stamped and skipped once stamped",
			runner: Runner{Parent: "r"},
			steps: func(run func(string) func(context.Context) error) []Step {
				return []Step{{Name: "a", Once: true, Run: run("a")}, {Name: "b", Once: true, Run: run("b")}, {Name: "c", Run: run("c")}}
			},
			stamped:   []string{"r/a"},
			wantRan:   "b c",
			wantMarks: "r/a r/b",
		},
		{
			name:   "a stamped once step is skipped before its run-if is asked",
			runner: Runner{Parent: "r"},
			steps: func(run func(string) func(context.Context) error) []Step {
				return []Step{{Name: "a", Once: true, RunIf: func() bool { panic("asked") }, Run: run("a")}}
			},
			stamped:   []string{"r/a"},
			wantMarks: "r/a",
		},
		{
			name:   "without stamps once steps run every time",
			runner: Runner{},
			steps: func(run func(string) func(context.Context) error) []Step {
				return []Step{{Name: "a", Once: true, Run: run("a")}}
			},
			noStamps: true,
			wantRan:  "a",
		},
		{
			name:   "an error stops the run and carries the step path",
			runner: Runner{Parent: "master"},
			steps: func(run func(string) func(context.Context) error) []Step {
				return []Step{{Name: "a", Once: true, Run: run("a")}, {Name: "etcd-join", Once: true, Run: run("etcd-join")}, {Name: "c", Run: run("c")}}
			},
			fail:      "etcd-join",
			wantRan:   "a etcd-join",
			wantErr:   "master/etcd-join: power cut",
			wantMarks: "master/a",
		},
		{
			name:   "a stamp that cannot be written fails the step",
			runner: Runner{Parent: "r"},
			steps: func(run func(string) func(context.Context) error) []Step {
				return []Step{{Name: "a", Once: true, Run: run("a")}, {Name: "b", Run: run("b")}}
			},
			markFails: true,
			wantRan:   "a",
			wantErr:   "r/a: stamping: disk full",
		},
		{
			name:   "without a parent the path is the name",
			runner: Runner{},
			steps: func(run func(string) func(context.Context) error) []Step {
				return []Step{{Name: "a", Run: run("a")}}
			},
			fail:    "a",
			wantRan: "a",
			wantErr: "a: power cut",
		},
		{
			name:   "wrap words the error",
			runner: Runner{Wrap: func(path string, err error) error { return fmt.Errorf("step %q: %w", path, err) }},
			steps: func(run func(string) func(context.Context) error) []Step {
				return []Step{{Name: "base root filesystem", Run: run("base root filesystem")}}
			},
			fail:    "base root filesystem",
			wantRan: "base root filesystem",
			wantErr: `step "base root filesystem": power cut`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ran []string
			cut := errors.New("power cut")
			run := func(name string) func(context.Context) error {
				return func(context.Context) error {
					ran = append(ran, name)
					if name == tc.fail {
						return cut
					}
					return nil
				}
			}
			stamps := &memStamps{done: map[string]bool{}}
			for _, s := range tc.stamped {
				stamps.done[s] = true
			}
			if tc.markFails {
				stamps.fail = errors.New("disk full")
			}
			r := tc.runner
			r.Stamps = stamps
			if tc.noStamps {
				r.Stamps = nil
			}
			err := r.Run(context.Background(), tc.steps(run))
			if got := strings.Join(ran, " "); got != tc.wantRan {
				t.Errorf("ran %q, want %q", got, tc.wantRan)
			}
			if (err == nil) != (tc.wantErr == "") || (err != nil && err.Error() != tc.wantErr) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
			if err != nil && tc.fail != "" && !errors.Is(err, cut) {
				t.Errorf("error %v does not wrap the step's", err)
			}
			var marks []string
			for _, s := range []string{"r/a", "r/b", "master/a", "master/etcd-join"} {
				if stamps.done[s] {
					marks = append(marks, s)
				}
			}
			if got := strings.Join(marks, " "); got != tc.wantMarks {
				t.Errorf("stamped %q, want %q", got, tc.wantMarks)
			}
		})
	}
}

// A list is all done when every Once step is stamped.
func TestAllDone(t *testing.T) {
	list := []Step{{Name: "a", Once: true}, {Name: "b"}, {Name: "c", Once: true}}
	for _, tc := range []struct {
		stamped []string
		nil     bool
		want    bool
	}{
		{stamped: []string{"r/a", "r/c"}, want: true},
		{stamped: []string{"r/a"}, want: false},
		{nil: true, want: false},
	} {
		r := Runner{Parent: "r", Stamps: &memStamps{done: map[string]bool{}}}
		for _, s := range tc.stamped {
			r.Stamps.(*memStamps).done[s] = true
		}
		if tc.nil {
			r.Stamps = nil
		}
		if got := r.AllDone(list); got != tc.want {
			t.Errorf("stamped %v (nil %v): AllDone %v, want %v", tc.stamped, tc.nil, got, tc.want)
		}
	}
	if !(Runner{}).AllDone([]Step{{Name: "a"}}) {
		t.Error("a list without Once steps is not all done")
	}
}

// Lines prints the build's progress lines: a start line, then how the
// step ended and how long it took; a skipped step gets one line.
func TestLines(t *testing.T) {
	var clock time.Time
	now := func() time.Time { clock = clock.Add(1200 * time.Millisecond); return clock }
	for _, tc := range []struct {
		name string
		fail string
		want string
	}{
		{
			name: "done and skipped",
			want: "[1/3] base root filesystem ...\n[1/3] base root filesystem: done in 1.2s\n" +
				"[2/3] components: skipped\n" +
				"[3/3] manifest ...\n[3/3] manifest: done in 1.2s\n",
		},
		{
			name: "failed",
			fail: "base root filesystem",
			want: "[1/3] base root filesystem ...\n[1/3] base root filesystem: failed after 1.2s\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			run := func(name string) func(context.Context) error {
				return func(context.Context) error {
					if name == tc.fail {
						return errors.New("tool exploded")
					}
					return nil
				}
			}
			list := []Step{
				{Name: "base root filesystem", Run: run("base root filesystem")},
				{Name: "components", RunIf: func() bool { return false }, Run: run("components")},
				{Name: "manifest", Run: run("manifest")},
			}
			Runner{Progress: Lines(&out, now)}.Run(context.Background(), list)
			if out.String() != tc.want {
				t.Errorf("progress:\n%s\nwant:\n%s", out.String(), tc.want)
			}
		})
	}
}

// Progress hears every step's events in order, labelled "[i/n] name",
// with the step's own error on Failed.
func TestProgressEvents(t *testing.T) {
	var got []string
	cut := errors.New("power cut")
	r := Runner{Progress: func(e Event) {
		s := fmt.Sprintf("%s %d", e.Label(), e.Kind)
		if e.Err != nil {
			s += " " + e.Err.Error()
		}
		got = append(got, s)
	}}
	r.Run(context.Background(), []Step{
		{Name: "a", Run: func(context.Context) error { return nil }},
		{Name: "b", RunIf: func() bool { return false }},
		{Name: "c", Run: func(context.Context) error { return cut }},
		{Name: "d", Run: func(context.Context) error { return nil }},
	})
	want := fmt.Sprint([]string{
		fmt.Sprintf("[1/4] a %d", Started), fmt.Sprintf("[1/4] a %d", Succeeded),
		fmt.Sprintf("[2/4] b %d", Skipped),
		fmt.Sprintf("[3/4] c %d", Started), fmt.Sprintf("[3/4] c %d power cut", Failed),
	})
	if fmt.Sprint(got) != want {
		t.Errorf("events %v, want %v", got, want)
	}
}
