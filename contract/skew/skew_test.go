package skew

import (
	"strings"
	"testing"
)

func TestKubernetes(t *testing.T) {
	for _, tc := range []struct {
		name, from, to string
		want           string // "" : allowed
	}{
		{"same release", "v1.37.1", "v1.37.1", ""},
		{"a patch", "v1.37.1", "v1.37.4", ""},
		{"a patch down within the minor", "v1.37.4", "v1.37.1", ""},
		{"the next minor", "v1.36.3", "v1.37.1", ""},
		{"a skipped minor", "v1.35.2", "v1.37.1", "skips 1.36"},
		{"a downgrade across minors", "v1.37.1", "v1.36.3", "downgrade to an earlier minor"},
		{"a major", "v1.37.1", "v2.0.0", "crosses a major"},
		{"no version", "", "v1.37.1", `Kubernetes release ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check(t, Kubernetes(tc.from, tc.to), tc.want)
		})
	}
}

func TestEtcd(t *testing.T) {
	for _, tc := range []struct {
		name, from, to string
		want           string
	}{
		{"same release, as a member and a tag name it", "3.6.5", "v3.6.5", ""},
		{"a patch", "3.6.4", "v3.6.5", ""},
		{"one step: 3.5 to 3.6", "3.5.21", "v3.6.5", ""},
		{"two steps: 3.4 to 3.6", "3.4.35", "v3.6.5", "etcd 3.4.35 to v3.6.5 skips 3.5"},
		{"down a minor: 3.6 to 3.5", "3.6.5", "v3.5.21", "downgrade"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check(t, Etcd(tc.from, tc.to), tc.want)
		})
	}
}

func check(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("refused: %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("got %v, want a refusal with %q", err, want)
	}
}
