package gobuild

import (
	"bytes"
	"testing"
	"time"
)

// Package names from go build -v are counted, not printed; what the
// compiler says is passed on whole, also when it arrives in pieces.
func TestProgressCountsPackagesAndPassesTheRest(t *testing.T) {
	var log bytes.Buffer
	p := &progress{log: &log, what: "kubernetes v1.37.1", total: 1500, start: time.Unix(0, 0)}
	for _, chunk := range []string{
		"internal/goarch\nk8s.io/apimachinery/pkg/util/sets\n",
		"# k8s.io/kubernetes/pkg/foo\npkg/foo/foo.go:12:3: undefined: ba",
		"r\nk8s.io/kubernetes/cmd/kubelet\n",
	} {
		if _, err := p.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	want := "# k8s.io/kubernetes/pkg/foo\npkg/foo/foo.go:12:3: undefined: bar\n"
	if log.String() != want {
		t.Errorf("passed through %q, want %q", log.String(), want)
	}
	log.Reset()
	p.report(time.Unix(330, 0))
	if got, want := log.String(), "kubernetes v1.37.1: compiled 3 of at most 1500 packages, 5m30s so far\n"; got != want {
		t.Errorf("report %q, want %q", got, want)
	}
}

func TestIsPackageLine(t *testing.T) {
	for line, want := range map[string]bool{
		"k8s.io/kubernetes/cmd/kubelet":    true,
		"runtime":                          true,
		"":                                 false,
		"# k8s.io/kubernetes/pkg/foo":      false,
		"foo.go:1:2: syntax error":         false,
		"go: downloading k8s.io/api v0.37": false,
	} {
		if got := isPackageLine(line); got != want {
			t.Errorf("isPackageLine(%q) = %v, want %v", line, got, want)
		}
	}
}
