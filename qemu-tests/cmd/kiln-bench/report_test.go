package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/qemu-tests/console"
)

func consoleAt(pairs ...any) []console.Line {
	var out []console.Line
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, console.Line{At: time.Duration(pairs[i].(int)) * time.Second, Text: pairs[i+1].(string)})
	}
	return out
}

// A part's timeline is drawn beside the results, which link it and list
// its step times; rows added later join the same chart.
func TestReportWritesTimelinesBesideTheResults(t *testing.T) {
	t.Setenv("KILN_ACCEL", "tcg") // the results' header names the accelerator: no KVM probe
	dir := t.TempDir()
	r := &report{started: time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)}
	r.add("Boot", [3]string{"boot path", "time", "floor"}, row{"ISO, SeaBIOS", "38.2 s", "51.4 s", ""})
	r.addTimeline("boots", "Boot timelines",
		stepsRow("ISO, SeaBIOS", consoleAt(3, "[    0.000000] Linux version 6.1.0", 38, "kiln-firstboot: done source=fw_cfg")),
		floorRow("ISO, SeaBIOS, agent masked", consoleAt(3, "[    0.000000] Linux version 6.1.0", 51, "kiln-bench login: ")))
	r.addTimeline("boots", "Boot timelines", stepsRow("ISO, OVMF", consoleAt(41, "kiln-firstboot: done source=fw_cfg")))
	results := filepath.Join(dir, "results.md")
	if err := r.write(results); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(results)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Boot timelines\n\n![Boot timelines](timeline-boots.svg)\n",
		"| step | ISO, SeaBIOS | ISO, SeaBIOS, agent masked | ISO, OVMF |\n",
		"| kernel started | 3.0 s | 3.0 s |  |\n",
		"| agent done | 38.0 s |  | 41.0 s |\n",
		"| login prompt |  | 51.0 s |  |\n",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results lack %q:\n%s", want, md)
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, "timeline-boots.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ISO, SeaBIOS, agent masked (floor)", "ISO, OVMF", "Measured 2026-11-24 10:00 UTC"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("timeline-boots.svg lacks %q", want)
		}
	}
}
