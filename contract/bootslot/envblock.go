package bootslot

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// BlockSize is the size of the environment block file grub-editenv
// creates, and the only size kiln reads or writes: GRUB's save_env writes
// the file in place and cannot grow it.
const BlockSize = 1024

// header is the block's first line, which GRUB checks before anything
// else (GRUB_ENVBLK_SIGNATURE).
const header = "# GRUB Environment Block\n"

// ErrMalformed is wrapped by every refusal of a block's bytes.
var ErrMalformed = errors.New("malformed GRUB environment block")

// Var is one variable of an environment block.
type Var struct{ Name, Value string }

// Env is an environment block's variables in the order they appear.
type Env []Var

// Get returns the value of the variable name and whether it is set.
func (e Env) Get(name string) (string, bool) {
	for _, v := range e {
		if v.Name == name {
			return v.Value, true
		}
	}
	return "", false
}

// ParseBlock reads an environment block as GRUB does (grub_envblk_iterate):
// after the header, a line starting with '#' is a comment (the padding is
// one), any other line is name=value with a backslash escaping the byte
// after it. It refuses what GRUB would stop at silently (a line without
// '=', a value running past the end), a block of another size, and a
// variable set twice, which GRUB's load_env and grub-editenv set would
// read differently.
func ParseBlock(b []byte) (Env, error) {
	if len(b) != BlockSize {
		return nil, fmt.Errorf("%w: %d bytes, want %d", ErrMalformed, len(b), BlockSize)
	}
	if !bytes.HasPrefix(b, []byte(header)) {
		return nil, fmt.Errorf("%w: no %q header", ErrMalformed, strings.TrimSuffix(header, "\n"))
	}
	if !bytes.HasSuffix(bytes.TrimRight(b, "#"), []byte{'\n'}) {
		return nil, fmt.Errorf("%w: it does not end in a newline and '#' padding, where GRUB's save_env looks for free space", ErrMalformed)
	}
	var env Env
	for p := len(header); p < len(b); {
		if b[p] == '#' {
			p = nextLine(b, p)
			continue
		}
		v, next, err := parseVar(b, p)
		if err != nil {
			return nil, err
		}
		if _, dup := env.Get(v.Name); dup {
			return nil, fmt.Errorf("%w: variable %q set twice", ErrMalformed, v.Name)
		}
		env = append(env, v)
		p = next
	}
	return env, nil
}

// nextLine returns the offset after the line starting at p, skipping
// escaped bytes as GRUB's find_next_line does.
func nextLine(b []byte, p int) int {
	for p < len(b) {
		switch b[p] {
		case '\\':
			p += 2
		case '\n':
			return p + 1
		default:
			p++
		}
	}
	return p + 1
}

// parseVar reads the name=value line at offset p and returns the offset
// of the next line.
func parseVar(b []byte, p int) (Var, int, error) {
	eq := bytes.IndexByte(b[p:], '=')
	if eq < 0 {
		return Var{}, 0, fmt.Errorf("%w: byte %d: a line with no '='", ErrMalformed, p)
	}
	name := string(b[p : p+eq])
	if err := checkName(name); err != nil {
		return Var{}, 0, fmt.Errorf("%w: byte %d: %w", ErrMalformed, p, err)
	}
	var value []byte
	for q := p + eq + 1; q < len(b); q++ {
		switch c := b[q]; c {
		case '\n':
			return Var{name, string(value)}, q + 1, nil
		case '\\':
			if q++; q < len(b) {
				value = append(value, b[q])
			}
		case 0:
			return Var{}, 0, fmt.Errorf("%w: variable %q: a NUL byte in its value", ErrMalformed, name)
		default:
			value = append(value, c)
		}
	}
	return Var{}, 0, fmt.Errorf("%w: variable %q: its value runs past the end of the block", ErrMalformed, name)
}

// checkName refuses a name GRUB would not read back as itself: empty,
// starting with '#' (a comment), holding '=', a newline or a NUL.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("an empty variable name")
	case name[0] == '#':
		return fmt.Errorf("variable name %q starts with '#'", name)
	case strings.ContainsAny(name, "=\n\x00"):
		return fmt.Errorf("variable name %q holds '=', a newline or a NUL", name)
	}
	return nil
}

// RenderBlock writes env as grub-editenv would: the header, one
// name=value line per variable with '\' and newline escaped by a '\',
// then '#' up to BlockSize. It refuses a name GRUB would misread, a value
// with a NUL (GRUB's values are C strings) and variables that do not fit.
func RenderBlock(env Env) ([]byte, error) {
	b := []byte(header)
	seen := map[string]bool{}
	for _, v := range env {
		if err := checkName(v.Name); err != nil {
			return nil, err
		}
		if seen[v.Name] {
			return nil, fmt.Errorf("variable %q set twice", v.Name)
		}
		seen[v.Name] = true
		if strings.IndexByte(v.Value, 0) >= 0 {
			return nil, fmt.Errorf("variable %q: a NUL byte in its value", v.Name)
		}
		b = appendVar(b, v)
	}
	if len(b) > BlockSize {
		return nil, fmt.Errorf("the variables take %d bytes, more than the %d-byte GRUB environment block", len(b), BlockSize)
	}
	return append(b, bytes.Repeat([]byte{'#'}, BlockSize-len(b))...), nil
}

func appendVar(b []byte, v Var) []byte {
	b = append(b, v.Name...)
	b = append(b, '=')
	for i := 0; i < len(v.Value); i++ {
		if c := v.Value[i]; c == '\\' || c == '\n' {
			b = append(b, '\\')
		}
		b = append(b, v.Value[i])
	}
	return append(b, '\n')
}
