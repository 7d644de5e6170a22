package role

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// answering records what ran and answers each command from a table
// keyed by the whole command line (output or error); a command not in
// the table gets neither.
type answering struct {
	answers map[string]answer
	ran     []string
}

type answer struct {
	out string
	err error
}

func (s *answering) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	cmd := name + " " + strings.Join(args, " ")
	s.ran = append(s.ran, cmd)
	a := s.answers[cmd]
	return []byte(a.out), a.err
}

// The node-local DNS address is put back where systemd-networkd left it
// out: on the link, or on a link made for it; a node where it is in
// place runs nothing but the look.
func TestEnsureNodeLocalAddress(t *testing.T) {
	const look = "ip -4 -o addr show dev kiln-dns"
	present := "5: kiln-dns    inet 169.254.20.10/32 scope global kiln-dns\\       valid_lft forever preferred_lft forever\n"
	noLink := errors.New(`exit status 1: Device "kiln-dns" does not exist.`)
	for _, tc := range []struct {
		name     string
		answers  map[string]answer
		wantRan  []string
		wantSaid bool
		wantErr  string
	}{
		{name: "in place", answers: map[string]answer{look: {out: present}}, wantRan: []string{look}},
		{name: "link without its address", answers: map[string]answer{look: {out: ""}},
			wantRan:  []string{look, "ip link set kiln-dns up", "ip addr replace 169.254.20.10/32 dev kiln-dns"},
			wantSaid: true},
		{name: "another address only", answers: map[string]answer{look: {out: "5: kiln-dns    inet 169.254.20.11/32 scope global kiln-dns\n"}},
			wantRan:  []string{look, "ip link set kiln-dns up", "ip addr replace 169.254.20.10/32 dev kiln-dns"},
			wantSaid: true},
		{name: "no link", answers: map[string]answer{look: {err: noLink}},
			wantRan:  []string{look, "ip link add kiln-dns type dummy", "ip link set kiln-dns up", "ip addr replace 169.254.20.10/32 dev kiln-dns"},
			wantSaid: true},
		{name: "link cannot be made", answers: map[string]answer{look: {err: noLink}, "ip link add kiln-dns type dummy": {err: errors.New("exit status 2: RTNETLINK answers: Operation not permitted")}},
			wantRan: []string{look, "ip link add kiln-dns type dummy"},
			wantErr: "the node-local DNS link kiln-dns is missing and could not be added"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := &answering{answers: tc.answers}
			var said []string
			l := nodeLocal{sys: sys, log: func(format string, args ...any) { said = append(said, format) }}
			err := l.ensure(context.Background())
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			if !slices.Equal(sys.ran, tc.wantRan) {
				t.Errorf("ran %q, want %q", sys.ran, tc.wantRan)
			}
			if (len(said) > 0) != tc.wantSaid {
				t.Errorf("console %q, want a line: %v", said, tc.wantSaid)
			}
		})
	}
}

// While a node waits for its own Ready, the look is repeated at most
// every nodeLocalCheckEvery.
func TestKeepNodeLocalAddressIsRateLimited(t *testing.T) {
	sys := &answering{answers: map[string]answer{}}
	l := nodeLocal{sys: sys, log: func(string, ...any) {}}
	keep := l.keep()
	for range 5 {
		keep(context.Background())
	}
	if looks := slices.DeleteFunc(slices.Clone(sys.ran), func(c string) bool { return !strings.HasPrefix(c, "ip -4 -o addr show") }); len(looks) != 1 {
		t.Errorf("looked %d times in a row, want once: %q", len(looks), sys.ran)
	}
}
