// Package validation reports problems in kiln's YAML input files the way an
// operator needs them: every problem at once, each naming the file, the
// field path (e.g. nodes[3].network.address) and the reason.
package validation

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// Error is one problem at one field of one file.
type Error struct {
	File   string
	Path   string
	Reason string
}

func (e Error) Error() string {
	switch {
	case e.Path == "":
		return fmt.Sprintf("%s: %s", e.File, e.Reason)
	default:
		return fmt.Sprintf("%s: %s: %s", e.File, e.Path, e.Reason)
	}
}

// List collects the problems found in one file.
type List struct {
	File   string
	Errors []Error
}

// Addf records a problem at path.
func (l *List) Addf(path, format string, args ...any) {
	l.Errors = append(l.Errors, Error{File: l.File, Path: path, Reason: fmt.Sprintf(format, args...)})
}

// Err returns nil when nothing was recorded, otherwise the list itself.
func (l *List) Err() error {
	if len(l.Errors) == 0 {
		return nil
	}
	return l
}

func (l *List) Error() string {
	lines := make([]string, len(l.Errors))
	for i, e := range l.Errors {
		lines[i] = e.Error()
	}
	return fmt.Sprintf("%d problem(s):\n  %s", len(l.Errors), strings.Join(lines, "\n  "))
}

// Path builds field paths: Path("nodes").Index(3).Field("network").
type Path string

// Field appends a named field.
func (p Path) Field(name string) Path {
	if p == "" {
		return Path(name)
	}
	return Path(string(p) + "." + name)
}

// Index appends a list index.
func (p Path) Index(i int) Path { return Path(fmt.Sprintf("%s[%d]", p, i)) }

func (p Path) String() string { return string(p) }

// DecodeStrict decodes YAML data into out (a pointer to a struct with json
// tags). Every key that out's type does not know is recorded in l with its
// path, so a typo is never silently ignored; so is every key given twice in
// one mapping, of which decoding would silently keep the last. A syntax
// error is recorded too. It returns false when data could not be decoded
// at all.
func DecodeStrict(data []byte, out any, l *List) bool {
	var generic any
	if err := yaml.Unmarshal(data, &generic); err != nil {
		l.Addf("", "not valid YAML: %v", err)
		return false
	}
	duplicateKeys(data, l)
	unknownFields(generic, reflect.TypeOf(out), "", l)
	if err := yaml.Unmarshal(data, out); err != nil {
		l.Addf("", "%v", err)
		return false
	}
	return true
}

// duplicateKeys records each key that repeats an earlier key of the same
// mapping, with the lines of both.
func duplicateKeys(data []byte, l *List) {
	var doc yamlv3.Node
	if yamlv3.Unmarshal(data, &doc) != nil {
		return
	}
	walkDuplicateKeys(&doc, "", l)
}

func walkDuplicateKeys(n *yamlv3.Node, path Path, l *List) {
	switch n.Kind {
	case yamlv3.DocumentNode:
		for _, c := range n.Content {
			walkDuplicateKeys(c, path, l)
		}
	case yamlv3.SequenceNode:
		for i, c := range n.Content {
			walkDuplicateKeys(c, path.Index(i), l)
		}
	case yamlv3.MappingNode:
		first := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yamlv3.ScalarNode || k.Tag == "!!merge" {
				continue
			}
			if line, dup := first[k.Value]; dup {
				l.Addf(path.Field(k.Value).String(), "duplicate key %q on lines %d and %d: only the last would count", k.Value, line, k.Line)
			} else {
				first[k.Value] = k.Line
			}
			walkDuplicateKeys(v, path.Field(k.Value), l)
		}
	}
}

// unknownFields walks a decoded YAML value beside the Go type it should
// decode into and records keys that the type has no field for.
func unknownFields(v any, t reflect.Type, path Path, l *List) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch val := v.(type) {
	case map[string]any:
		switch t.Kind() {
		case reflect.Struct:
			fields := jsonFields(t)
			keys := make([]string, 0, len(val))
			for k := range val {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				ft, ok := fields[k]
				if !ok {
					l.Addf(path.Field(k).String(), "unknown field")
					continue
				}
				unknownFields(val[k], ft, path.Field(k), l)
			}
		case reflect.Map:
			for k, e := range val {
				unknownFields(e, t.Elem(), path.Field(k), l)
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, e := range val {
				unknownFields(e, t.Elem(), path.Index(i), l)
			}
		}
	}
}

// jsonFields maps the JSON names of t's fields (embedded structs
// flattened) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name := strings.Split(tag, ",")[0]
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			for k, v := range jsonFields(ft) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}
