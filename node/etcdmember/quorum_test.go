package etcdmember

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

func TestRemovalRefusal(t *testing.T) {
	m4, m5 := member(0xa4, "m4", "10.0.0.14"), member(0xa5, "m5", "10.0.0.15")
	learner := Member{ID: 0xb1, PeerURLs: []string{PeerURL("10.0.0.19")}, IsLearner: true}
	three, five := []Member{m1, m2, m3}, []Member{m1, m2, m3, m4, m5}
	for _, tc := range []struct {
		name   string
		list   []Member
		down   []Member
		remove Member
		want   string // "" : allowed
	}{
		{"three voters, all up: one may go", three, nil, m2, ""},
		{"three voters, one down: the down one may go", three, []Member{m3}, m3, ""},
		{"three voters, one down: an up one may not", three, []Member{m3}, m1, "would leave etcd without quorum: 2 voting members would remain, of which 1 answer"},
		{"three voters, two down: nothing commits", three, []Member{m2, m3}, m3, "etcd has no quorum: 1 of 3"},
		{"two voters, both up: one may go", []Member{m1, m2}, nil, m2, ""},
		{"two voters, one down: nothing commits", []Member{m1, m2}, []Member{m2}, m2, "etcd has no quorum: 1 of 2"},
		{"the last voter never goes", []Member{m1}, nil, m1, "last master"},
		{"a learner always may go", []Member{m1, learner}, nil, learner, ""},
		{"five voters, two down: a down one may go", five, []Member{m4, m5}, m5, ""},
		{"five voters, two down: an up one may not", five, []Member{m4, m5}, m1, "of which 2 answer (not answering: m4, m5; they need 3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := downProberOf(tc.down...)
			got := RemovalRefusal(context.Background(), e, tc.list, tc.remove)
			switch {
			case tc.want == "" && got != nil:
				t.Errorf("refused: %v", got)
			case tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)):
				t.Errorf("got %v, want a refusal with %q", got, tc.want)
			case got != nil && got.WayOut == "":
				t.Errorf("a refusal without a way out: %v", got)
			}
		})
	}
}

func member(id uint64, name, addr string) Member {
	return Member{ID: id, Name: name, PeerURLs: []string{PeerURL(addr)}, ClientURLs: []string{ClientURL(addr)}}
}

var m1, m2, m3 = member(0xa1, "m1", "10.0.0.11"), member(0xa2, "m2", "10.0.0.12"), member(0xa3, "m3", "10.0.0.13")

// downProber answers for every member but the given ones.
type downProber map[string]bool

func downProberOf(ms ...Member) downProber {
	d := downProber{}
	for _, m := range ms {
		d[m.ClientURLs[0]] = true
	}
	return d
}

func (d downProber) Healthy(_ context.Context, clientURL string) error {
	if d[clientURL] {
		return fmt.Errorf("%s: context deadline exceeded", clientURL)
	}
	return nil
}

func TestMembersOf(t *testing.T) {
	unstarted := Member{ID: 0xb1, PeerURLs: []string{PeerURL("10.0.0.12")}, IsLearner: true}
	list := []Member{m1, m2, m3, unstarted}
	got := MembersOf(list, "m2", PeerURL("10.0.0.12"))
	if len(got) != 2 || got[0].ID != m2.ID || got[1].ID != unstarted.ID {
		t.Errorf("MembersOf(m2) = %v, want m2 and the unstarted learner with its peer URL", got)
	}
	if got := MembersOf(list, "m9", ""); len(got) != 0 {
		t.Errorf("MembersOf(m9) = %v, want none", got)
	}
}

func TestFailureRefusal(t *testing.T) {
	m4, m5 := member(0xa4, "m4", "10.0.0.14"), member(0xa5, "m5", "10.0.0.15")
	learner := Member{ID: 0xb1, PeerURLs: []string{PeerURL("10.0.0.19")}, IsLearner: true}
	three, five := []Member{m1, m2, m3}, []Member{m1, m2, m3, m4, m5}
	for _, tc := range []struct {
		name string
		list []Member
		down []Member
		fail Member
		want string // "" : allowed
	}{
		{"three voters, all up: one may go down", three, nil, m2, ""},
		{"three voters, one down: the down one may reboot", three, []Member{m3}, m3, ""},
		{"three voters, one down: an up one may not", three, []Member{m3}, m1, "the 1 others answering are fewer than the 2 it needs (not answering: m3)"},
		{"two voters: neither may go down", []Member{m1, m2}, nil, m2, "of 2 voting members, the 1 others answering are fewer than the 2"},
		{"one voter: it may not go down", []Member{m1}, nil, m1, "member a1 (m1,"},
		{"a learner may always go down", []Member{m1, learner}, nil, learner, ""},
		{"five voters, one down: another may go down", five, []Member{m5}, m1, ""},
		{"five voters, two down: none more", five, []Member{m4, m5}, m1, "not answering: m4, m5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FailureRefusal(context.Background(), downProberOf(tc.down...), tc.list, tc.fail)
			switch {
			case tc.want == "" && got != nil:
				t.Errorf("refused: %v", got)
			case tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)):
				t.Errorf("got %v, want a refusal with %q", got, tc.want)
			case got != nil && got.WayOut == "":
				t.Errorf("a refusal without a way out: %v", got)
			}
		})
	}
}

func TestDownVoters(t *testing.T) {
	learner := Member{ID: 0xb1, PeerURLs: []string{PeerURL("10.0.0.19")}, ClientURLs: []string{ClientURL("10.0.0.19")}, IsLearner: true}
	got := DownVoters(context.Background(), downProberOf(m2, learner), []Member{m1, m2, m3, learner})
	if strings.Join(got, ",") != "m2" {
		t.Errorf("DownVoters = %v, want m2 only (a learner is no voter)", got)
	}
}
