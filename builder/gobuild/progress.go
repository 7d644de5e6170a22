package gobuild

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progressEvery is how often a long go build says how far it is.
const progressEvery = 30 * time.Second

// progress sits between go build -v and the log. The go command names
// each package on a line of its own as it compiles it; progress counts
// those lines instead of printing them, passes every other line (a
// compiler error, a "# package" header) through, and reports the count
// on demand: a cold Kubernetes build compiles for 15-25 min, and a count
// that grows tells a person it is not hung.
type progress struct {
	log   io.Writer
	what  string // e.g. "kubernetes v1.37.1"
	total int    // packages the build may compile (go list -deps); 0 if unknown
	start time.Time

	mu       sync.Mutex
	compiled int
	partial  []byte
}

func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := string(p.partial[:i])
		p.partial = p.partial[i+1:]
		if isPackageLine(line) {
			p.compiled++
			continue
		}
		if _, err := fmt.Fprintln(p.log, line); err != nil {
			return len(b), err
		}
	}
}

// isPackageLine tells go build -v's package names from everything else:
// an import path has no spaces, no colon and does not start with '#'.
func isPackageLine(line string) bool {
	return line != "" && !strings.ContainsAny(line, " \t:") && !strings.HasPrefix(line, "#")
}

// report writes one progress line.
func (p *progress) report(now time.Time) {
	p.mu.Lock()
	n := p.compiled
	p.mu.Unlock()
	of := ""
	if p.total > 0 {
		of = fmt.Sprintf(" of at most %d", p.total)
	}
	fmt.Fprintf(p.log, "%s: compiled %d%s packages, %s so far\n", p.what, n, of, now.Sub(p.start).Round(time.Second))
}

// every reports each interval until stop is closed.
func (p *progress) every(interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			p.report(now)
		}
	}
}
