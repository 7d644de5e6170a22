package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// results renders a results file the way report.markdown does.
func results(t *testing.T, measured time.Time, sections ...section) string {
	t.Helper()
	t.Setenv("KILN_ACCEL", "tcg") // the results' header names the accelerator: no KVM probe
	r := &report{started: measured, sections: sections}
	return r.markdown()
}

func TestReadmeFiguresComeFromTheNewestResults(t *testing.T) {
	dir := t.TempDir()
	head := [3]string{"build", "time", "floor"}
	older := results(t, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		section{title: "Build", head: head, rows: []row{{"warm (cached base rootfs), nothing changed", "20.0 s", "10.0 s (raw tools)", ""}}},
		section{title: "Genesis (2 vCPUs)", head: head, rows: []row{ratioRow("power-on to node Ready", 90*time.Second, 30*time.Second, 4, "")}})
	newer := results(t, time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC),
		section{title: "Build", head: head, rows: []row{{"warm (cached base rootfs), nothing changed", "14.0 s", "10.0 s (raw tools)", ""}}})
	for name, text := range map[string]string{"results-a.md": older, "results-b.md": newer} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	readme := filepath.Join(dir, "README.md")
	os.WriteFile(readme, []byte("# x\n\n"+figuresBegin+"\nold table\n"+figuresEnd+"\n\nafter\n"), 0o644)
	if err := writeSummary(readme, dir); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(readme)
	for _, want := range []string{
		"| build, warm, nothing changed | 14.0 s | 10.0 s (raw tools) |  | [results-b](bench/results-b.md), 2026-12-06 |",
		"| genesis: power-on to node Ready | 90.0 s | 30.0 s | 3.00× the floor; goal ≤ 4×: met | [results-a](bench/results-a.md), 2026-12-01 |",
		"| cluster: a whole-cluster power cut to all Nodes Ready again | not measured yet | | | |",
		"\n\nafter\n",
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("README lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(string(got), "old table") {
		t.Errorf("the old table stayed:\n%s", got)
	}
}

func TestReadmeWithoutMarkersIsLeftAlone(t *testing.T) {
	dir := t.TempDir()
	readme := filepath.Join(dir, "README.md")
	os.WriteFile(readme, []byte("# mine\n"), 0o644)
	if err := writeSummary(readme, dir); err == nil || !strings.Contains(err.Error(), "no figures table") {
		t.Fatalf("got %v, want the missing markers named", err)
	}
	if got, _ := os.ReadFile(readme); string(got) != "# mine\n" {
		t.Errorf("README changed: %q", got)
	}
}

// Every headline names a row the bench writes: the labels of the rows
// that report.go's callers make are matched by these prefixes.
func TestHeadlinesMatchTheBenchRows(t *testing.T) {
	sources, _ := filepath.Glob("*.go")
	var all strings.Builder
	for _, p := range sources {
		if strings.HasSuffix(p, "_test.go") || p == "summary.go" {
			continue
		}
		data, _ := os.ReadFile(p)
		all.Write(data)
	}
	for _, h := range headlines {
		prefix := strings.SplitN(h.row, " ", 2)[0]
		if h.section == "Artifacts" || h.section == "Boot" {
			continue // artifact paths and boot path names come from data
		}
		if !strings.Contains(all.String(), h.row) && !strings.Contains(all.String(), prefix) {
			t.Errorf("headline %q: no bench row starts %q", h.label, h.row)
		}
	}
}
