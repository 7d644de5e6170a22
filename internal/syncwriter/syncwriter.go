// Package syncwriter owns one small thing: a writer that several
// goroutines can share, each Write reaching the underlying writer whole.
package syncwriter

import (
	"io"
	"sync"
)

// Writer serialises writes to w.
type Writer struct {
	mu sync.Mutex
	w  io.Writer
}

// New wraps w.
func New(w io.Writer) *Writer { return &Writer{w: w} }

func (l *Writer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
