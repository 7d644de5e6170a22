// Package outdir owns what kiln may overwrite where an operator points -o:
// the marker file in which a command lists what it wrote into an output,
// the refusal an operator gets when a path holds something kiln did not
// write, and comparing paths by where they really are.
package outdir

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kiln-project/kiln/internal/atomicfile"
)

// MarkerName is the file, in an output directory, listing what kiln wrote.
const MarkerName = ".kiln-output"

// Marker is what one kind of kiln output holds: the command that wrote
// it (the file's first line, e.g. "kiln gen") and the paths it wrote,
// relative to the output directory and slash-separated, one a line.
type Marker struct {
	Kind  string
	Paths []string
}

// ReadMarker reads dir's marker; ok is false when dir has none.
func ReadMarker(dir string) (m Marker, ok bool, err error) {
	p := filepath.Join(dir, MarkerName)
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Marker{}, false, nil
	}
	if err != nil {
		return Marker{}, false, fmt.Errorf("reading kiln's output marker: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
		case m.Kind == "":
			m.Kind = line
		default:
			m.Paths = append(m.Paths, path.Clean(line))
		}
	}
	if err := sc.Err(); err != nil {
		return Marker{}, false, fmt.Errorf("reading %s: %w", p, err)
	}
	return m, true, nil
}

// WriteMarker atomically replaces dir's marker with m, paths sorted.
func WriteMarker(dir string, m Marker) error {
	paths := slices.Clone(m.Paths)
	slices.Sort(paths)
	var b strings.Builder
	b.WriteString(m.Kind + "\n")
	for _, p := range slices.Compact(paths) {
		b.WriteString(p + "\n")
	}
	return atomicfile.WriteFile(filepath.Join(dir, MarkerName), []byte(b.String()), 0o644, nil)
}

// Set is the paths kiln wrote into an output and every directory above
// them, relative to the output and slash-separated.
type Set map[string]bool

// NewSet is the set of paths and their parent directories.
func NewSet(paths ...string) Set {
	s := Set{}
	for _, p := range paths {
		for p = path.Clean(p); p != "." && p != "/" && !s[p]; p = path.Dir(p) {
			s[p] = true
		}
	}
	return s
}

// Has says whether kiln wrote rel (slash-separated), or something below it.
func (s Set) Has(rel string) bool { return s[path.Clean(rel)] }

// Foreign walks the tree at root and returns the first entry, relative to
// root and slash-separated, that owned does not claim; "" when there is
// none. A directory owned does not claim is not walked into.
func Foreign(root string, owned func(rel string, d fs.DirEntry) bool) (string, error) {
	var found string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if !owned(filepath.ToSlash(rel), d) {
			found = filepath.ToSlash(rel)
			return fs.SkipAll
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("looking through %s: %w", root, err)
	}
	return found, nil
}

// Refusal is kiln declining to write at Path because of what is there.
// Commands report it as a usage error: the operator's way out is another
// path, or moving their own files away.
type Refusal struct {
	Path   string // as the operator gave it
	What   string // what is there, e.g. "is a regular file, not a directory"
	WayOut string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("refusing to write to %s: it %s; %s", r.Path, r.What, r.WayOut)
}

// Resolve returns p absolute, with every symbolic link in the part of it
// that exists resolved, so that two names for one place compare equal.
func Resolve(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	rest := ""
	for dir := abs; ; dir = filepath.Dir(dir) {
		resolved, err := filepath.EvalSymlinks(dir)
		if err == nil {
			return filepath.Join(resolved, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("resolving %s: %w", p, err)
		}
		if filepath.Dir(dir) == dir {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// Within says whether p is dir or below it; both must be resolved.
func Within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
