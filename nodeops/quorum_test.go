package nodeops

import (
	"context"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/etcdmember"
)

func TestRemovalRefusal(t *testing.T) {
	m4, m5 := member(0xa4, "m4", "10.0.0.14"), member(0xa5, "m5", "10.0.0.15")
	learner := etcdmember.Member{ID: 0xb1, PeerURLs: []string{etcdmember.PeerURL("10.0.0.19")}, IsLearner: true}
	three, five := []etcdmember.Member{m1, m2, m3}, []etcdmember.Member{m1, m2, m3, m4, m5}
	for _, tc := range []struct {
		name   string
		list   []etcdmember.Member
		down   []etcdmember.Member
		remove etcdmember.Member
		want   string // "" : allowed
	}{
		{"three voters, all up: one may go", three, nil, m2, ""},
		{"three voters, one down: the down one may go", three, []etcdmember.Member{m3}, m3, ""},
		{"three voters, one down: an up one may not", three, []etcdmember.Member{m3}, m1, "would leave etcd without quorum: 2 voting members would remain, of which 1 answer"},
		{"three voters, two down: nothing commits", three, []etcdmember.Member{m2, m3}, m3, "etcd has no quorum: 1 of 3"},
		{"two voters, both up: one may go", []etcdmember.Member{m1, m2}, nil, m2, ""},
		{"two voters, one down: nothing commits", []etcdmember.Member{m1, m2}, []etcdmember.Member{m2}, m2, "etcd has no quorum: 1 of 2"},
		{"the last voter never goes", []etcdmember.Member{m1}, nil, m1, "last master"},
		{"a learner always may go", []etcdmember.Member{m1, learner}, nil, learner, ""},
		{"five voters, two down: a down one may go", five, []etcdmember.Member{m4, m5}, m5, ""},
		{"five voters, two down: an up one may not", five, []etcdmember.Member{m4, m5}, m1, "of which 2 answer (not answering: m4, m5; they need 3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &fakeEtcd{members: tc.list, down: downURLs(tc.down...)}
			got := removalRefusal(context.Background(), e, tc.list, tc.remove)
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
