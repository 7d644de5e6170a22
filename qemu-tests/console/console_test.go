package console

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestAddStampsEachLineWithItsFirstBytes(t *testing.T) {
	type chunk struct {
		data string
		at   time.Duration
	}
	for _, tc := range []struct {
		name   string
		chunks []chunk
		want   []Line
	}{
		{
			name:   "whole lines",
			chunks: []chunk{{"a\r\nb\r\n", time.Second}, {"c\n", 2 * time.Second}},
			want:   []Line{{time.Second, "a"}, {time.Second, "b"}, {2 * time.Second, "c"}},
		},
		{
			name:   "a line split across reads keeps the first read's time",
			chunks: []chunk{{"a\nkiln-first", time.Second}, {"boot: done\n", 3 * time.Second}},
			want:   []Line{{time.Second, "a"}, {time.Second, "kiln-firstboot: done"}},
		},
		{
			name:   "an unfinished last line is a line",
			chunks: []chunk{{"a\n", time.Second}, {"\x1b[0mkiln-bench login: ", 4 * time.Second}},
			want:   []Line{{time.Second, "a"}, {4 * time.Second, "kiln-bench login: "}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Recorder{stopped: true}
			for _, c := range tc.chunks {
				r.add([]byte(c.data), c.at)
			}
			if got := r.Lines(); !slices.Equal(got, tc.want) {
				t.Errorf("Lines() = %q, want %q", got, tc.want)
			}
		})
	}
}

// The recorder waits for QEMU to create the file, reads it as it grows,
// and stops reading at Stop.
func TestRecordTailsTheFileUntilStopped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console-1.log")
	r := Record(path, time.Now(), 10*time.Millisecond)
	time.Sleep(30 * time.Millisecond)
	if err := os.WriteFile(path, []byte("kiln-firstboot: start\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, r, 1)
	appendTo(t, path, "kiln-firstboot: config applied\n")
	waitFor(t, r, 2)
	r.Stop()
	appendTo(t, path, "after the power cut\n")
	got := r.Lines()
	if len(got) != 2 || got[0].Text != "kiln-firstboot: start" || got[1].Text != "kiln-firstboot: config applied" {
		t.Fatalf("Lines() = %q", got)
	}
	if got[0].At <= 0 || got[1].At < got[0].At {
		t.Errorf("times %s, %s: want positive and in order", got[0].At, got[1].At)
	}
}

func waitFor(t *testing.T, r *Recorder, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		r.mu.Lock()
		got := len(r.lines)
		r.mu.Unlock()
		if got >= n {
			return
		}
	}
	t.Fatalf("the recorder did not read %d lines within 5 s", n)
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func TestCleanStripsTerminalEscapes(t *testing.T) {
	got := Clean("\x1b[0;32m  OK  \x1b[0m] Reached target \x1b[1;39mMulti-User System\x1b[0m.\r")
	if got != "  OK  ] Reached target Multi-User System." {
		t.Fatalf("got %q", got)
	}
}
