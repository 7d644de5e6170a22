// Package console records a serial console file while QEMU writes it:
// each line with the time the host first read it, since power-on. The
// console file itself carries no times; the agent's lines go to the
// console directly, not through the kernel's timestamped log.
package console

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"sync"
	"time"
)

// Line is one console line and when it arrived.
type Line struct {
	At   time.Duration // since power-on, when the host first read the line's first bytes
	Text string        // without carriage returns and terminal escapes
}

// Recorder tails one console file.
type Recorder struct {
	path  string
	start time.Time

	mu        sync.Mutex
	f         *os.File
	stopped   bool
	lines     []Line
	partial   []byte
	partialAt time.Duration

	stop, done chan struct{}
	once       sync.Once
}

// Record starts reading path every interval; start is power-on. The file
// may not exist yet: QEMU creates it once it runs.
func Record(path string, start time.Time, interval time.Duration) *Recorder {
	r := &Recorder{path: path, start: start, stop: make(chan struct{}), done: make(chan struct{})}
	go r.run(interval)
	return r
}

func (r *Recorder) run(interval time.Duration) {
	defer close(r.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-r.stop:
			r.finish()
			return
		case <-tick.C:
			r.mu.Lock()
			r.read()
			r.mu.Unlock()
		}
	}
}

// Stop reads what is left and closes the file; Lines keeps answering.
func (r *Recorder) Stop() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

func (r *Recorder) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.read()
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
	r.stopped = true
}

// Lines returns every line so far, the unfinished last one included (a
// login prompt ends without a newline).
func (r *Recorder) Lines() []Line {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.read()
	out := append([]Line(nil), r.lines...)
	if len(r.partial) > 0 {
		out = append(out, Line{At: r.partialAt, Text: Clean(string(r.partial))})
	}
	return out
}

// read stamps what was written since the last read; r.mu is held.
func (r *Recorder) read() {
	if r.stopped {
		return
	}
	if r.f == nil {
		f, err := os.Open(r.path)
		if err != nil {
			return
		}
		r.f = f
	}
	data, _ := io.ReadAll(r.f)
	if len(data) == 0 {
		return
	}
	r.add(data, time.Since(r.start))
}

// add splits data, read at at, into lines; a line is stamped with when
// its first bytes were read.
func (r *Recorder) add(data []byte, at time.Duration) {
	if len(r.partial) == 0 {
		r.partialAt = at
	}
	r.partial = append(r.partial, data...)
	for {
		i := bytes.IndexByte(r.partial, '\n')
		if i < 0 {
			return
		}
		r.lines = append(r.lines, Line{At: r.partialAt, Text: Clean(string(r.partial[:i]))})
		r.partial = r.partial[i+1:]
		r.partialAt = at
	}
}

var escapes = regexp.MustCompile(`\x1b\[[0-9;?]*[a-zA-Z]|\r`)

// Clean removes carriage returns and terminal escapes from a console line.
func Clean(s string) string { return escapes.ReplaceAllString(s, "") }
