package vm

import (
	"os"
	"regexp"
	"testing"
)

// A line QEMU is still writing is no whole line: its fields may not be
// there yet. Once its newline is written, it is. Find takes it as it is
// (a login prompt never gets its newline).
func TestFindWaitsForTheWholeLine(t *testing.T) {
	v := &VM{Config: Config{Dir: t.TempDir()}, boot: 1}
	probe := regexp.MustCompile(`probe: boot=`)
	write := func(s string) {
		if err := os.WriteFile(v.ConsolePath(1), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("booting\nprobe: boot=0aea5a84-a")
	if line, ok := v.find(probe, true); ok {
		t.Fatalf("found %q as a whole line before its newline", line)
	}
	if line, ok := v.Find(probe); !ok || line != "probe: boot=0aea5a84-a" {
		t.Fatalf("Find: %q %v, want the line being written (a login prompt has no newline)", line, ok)
	}
	if lines := v.Lines(); len(lines) != 2 {
		t.Fatalf("Lines: %q, want the partial line too (for failure messages)", lines)
	}
	write("booting\nprobe: boot=0aea5a84-a marker=present\n")
	if line, ok := v.find(probe, true); !ok || line != "probe: boot=0aea5a84-a marker=present" {
		t.Fatalf("Find: %q %v, want the whole line", line, ok)
	}
}
