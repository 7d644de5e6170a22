package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kiln-project/kiln/internal/atomicfile"
)

// The state filesystem's layout (what kiln keeps where on it) has a
// version, recorded in LayoutFile at its root. A kiln runs on the layout
// it writes and on every older one it has steps from, and moves the
// layout forward only once its boot is judged good (Migrate): until
// then the image it replaced, booted again by a rollback, still finds a
// layout it knows. A layout newer than this kiln knows is refused at
// mount and left unchanged (*LayoutError).

// LayoutFile, at the root of the state filesystem, records its layout.
const LayoutFile = "kiln-layout.json"

// unversioned is the layout of a state filesystem without LayoutFile:
// one written by a kiln from before the layout had a version.
const unversioned = 1

// layoutSteps move the layout forward one version each, in order: the
// step at index i moves layout i+1 to layout i+2. A step must be safe to
// run again (a power cut may cut it short; LayoutFile is rewritten after
// each step), and the kiln that has it must run on the layout before it.
var layoutSteps = []layoutStep{
	// Layout 2 is layout 1 with its version recorded: the step only
	// writes LayoutFile, from which on an older kiln can tell a layout
	// it does not know.
	{what: "record the layout's version in " + LayoutFile, apply: func(string) error { return nil }},
}

type layoutStep struct {
	what  string
	apply func(stateDir string) error
}

// Layout is the version of the layout this kiln writes.
var Layout = unversioned + len(layoutSteps)

type layoutRecord struct {
	Layout int `json:"layout"`
	// WrittenBy is the kiln version that wrote the record: the version
	// an older kiln's refusal asks the operator to boot.
	WrittenBy string `json:"writtenBy,omitempty"`
}

// LayoutError is a state filesystem whose layout this kiln does not
// know: newer than Layout, or recorded in a LayoutFile that does not
// parse. It is left unmounted and unchanged.
type LayoutError struct {
	Dev       string
	Found     int    // the layout recorded; 0 when the record does not parse
	WrittenBy string // the kiln that recorded it, if it said
	This      string // this kiln's version
	Reason    string // why the record does not parse
}

func (e *LayoutError) Error() string {
	if e.Found == 0 {
		return fmt.Sprintf("the %s filesystem on %s has a %s that does not parse (%s): its layout is unknown to this kiln (%s), which leaves it unmounted and unchanged",
			Label, e.Dev, LayoutFile, e.Reason, e.This)
	}
	by, boot := "", "a newer kiln"
	if e.WrittenBy != "" {
		by, boot = ", written by kiln "+e.WrittenBy, "kiln "+e.WrittenBy+" or newer"
	}
	return fmt.Sprintf("the %s filesystem on %s has state layout %d%s; this kiln (%s) knows layouts up to %d: it leaves it unmounted and unchanged; boot an image of %s",
		Label, e.Dev, e.Found, by, e.This, Layout, boot)
}

// readLayout reads the layout of the state filesystem mounted at dir.
func readLayout(dir string) (layoutRecord, error) {
	data, err := os.ReadFile(filepath.Join(dir, LayoutFile))
	if errors.Is(err, os.ErrNotExist) {
		return layoutRecord{Layout: unversioned}, nil
	}
	if err != nil {
		return layoutRecord{}, fmt.Errorf("reading the state partition's %s: %w", LayoutFile, err)
	}
	var rec layoutRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return layoutRecord{}, &LayoutError{Reason: err.Error()}
	}
	if rec.Layout < unversioned {
		return layoutRecord{}, &LayoutError{Reason: fmt.Sprintf("layout %d", rec.Layout)}
	}
	return rec, nil
}

// checkLayout refuses a mounted state filesystem whose layout this kiln
// does not know.
func (m *Manager) checkLayout(dev string) error {
	rec, err := readLayout(m.path(MountPoint))
	var le *LayoutError
	switch {
	case errors.As(err, &le):
		le.Dev, le.This = dev, m.version()
		return le
	case err != nil:
		return err
	case rec.Layout > Layout:
		return &LayoutError{Dev: dev, Found: rec.Layout, WrittenBy: rec.WrittenBy, This: m.version()}
	}
	return nil
}

// writeLayout records layout n in the state filesystem's root dir.
func (m *Manager) writeLayout(dir string, n int) error {
	rec, _ := json.MarshalIndent(layoutRecord{Layout: n, WrittenBy: m.Version}, "", "  ")
	path := filepath.Join(dir, LayoutFile)
	if err := atomicfile.WriteFile(path, append(rec, '\n'), 0o644, nil); err != nil {
		return fmt.Errorf("recording state layout %d: %w", n, err)
	}
	return nil
}

// Migrate moves the mounted state filesystem forward to Layout, step by
// step, and returns the layout it found. Call it only once this boot is
// judged good: the image it replaced may not know the new layout. With
// no state filesystem mounted (the node keeps its state in RAM) it does
// nothing.
func (m *Manager) Migrate() (from int, err error) {
	mounted, err := m.mountPoints()
	if err != nil {
		return 0, err
	}
	if !mounted[MountPoint] {
		return Layout, nil
	}
	dir := m.path(MountPoint)
	rec, err := readLayout(dir)
	if err != nil {
		return 0, err
	}
	if rec.Layout > Layout {
		return rec.Layout, &LayoutError{Found: rec.Layout, WrittenBy: rec.WrittenBy, This: m.version()}
	}
	for n := rec.Layout; n < Layout; n++ {
		step := layoutSteps[n-unversioned]
		if err := step.apply(dir); err != nil {
			return rec.Layout, fmt.Errorf("moving the state layout from %d to %d (%s): %w", n, n+1, step.what, err)
		}
		if err := m.writeLayout(dir, n+1); err != nil {
			return rec.Layout, err
		}
	}
	return rec.Layout, nil
}

func (m *Manager) version() string {
	if m.Version == "" {
		return "of unknown version"
	}
	return m.Version
}
