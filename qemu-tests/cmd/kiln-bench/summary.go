package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/kiln-project/kiln/internal/atomicfile"
)

// The README's figures table sits between these markers; make bench
// writes it from the results files in bench/, so the README quotes the
// current figures and nothing else.
const (
	figuresBegin = "<!-- figures: written by make bench (qemu-tests/cmd/kiln-bench); do not edit -->"
	figuresEnd   = "<!-- end of figures -->"
)

// headline is one figure the README quotes: a row of a results file's
// section, found by the start of the section's title and of the row's
// first cell. The newest results file holding it wins.
type headline struct {
	label, section, row string
}

// headlines are the README's figures, in its order.
var headlines = []headline{
	{"build, warm, nothing changed", "Build", "warm (cached base rootfs), nothing changed"},
	{"build, warm, after a change to kiln", "Build", "warm, after a change to kiln"},
	{"build, cold (every cache empty)", "Build", "cold"},
	{"`node.iso` size", "Artifacts", "node.iso"},
	{"`node.raw` size", "Artifacts", "node.raw"},
	{"ISO, SeaBIOS: power-on to `done`", "Boot", "ISO, SeaBIOS"},
	{"ISO, OVMF: power-on to `done`", "Boot", "ISO, OVMF"},
	{"raw disk, OVMF: power-on to `done`", "Boot", "raw disk, OVMF"},
	{"PXE, SeaBIOS + iPXE: power-on to `done`", "Boot", "PXE, SeaBIOS"},
	{"PXE, OVMF + iPXE: power-on to `done`", "Boot", "PXE, OVMF"},
	{"PXE through kiln serve (DHCP, HTTPS config): power-on to `done`", "Boot", "PXE through kiln serve"},
	{"genesis: power-on to node Ready", "Genesis (", "power-on to node Ready"},
	{"genesis: a power cut to node Ready again (median of three)", "Genesis (", "power cut: power-on to node Ready again"},
	{"cluster (m1, m2, w1 powered on together): all three Nodes Ready", "Cluster (", "**all Ready**"},
	{"cluster: master join, m2 power-on to `done`", "Cluster (", "**master join**"},
	{"cluster: a whole-cluster power cut to all Nodes Ready again", "Cluster (", "**power cut**"},
	{"`kiln node remove w1`", "Cluster (", "**remove**: `kiln node remove w1`"},
	{"w1 re-imaged to Ready", "Cluster (", "**re-image** w1"},
	{"`kiln node remove m2`", "Cluster (", "**remove**: `kiln node remove m2`"},
	{"m2 re-imaged to Ready", "Cluster (", "**re-image** m2"},
	{"upgrade: `kiln upgrade` start to the node's staged answer (median of three)", "Upgrade (", "**staging**"},
	{"upgrade: the staged node's reboot to its health gate on the new slot (median of three)", "Upgrade (", "**reboot to gate**"},
}

// resultRow is one row of a results file's table.
type resultRow struct {
	section string
	cells   []string
}

// resultsFile is what a results file holds: when it was measured, and
// its tables' rows.
type resultsFile struct {
	name     string
	measured time.Time
	rows     []resultRow
}

var measuredRe = regexp.MustCompile(`^Measured (\d{4}-\d{2}-\d{2} \d{2}:\d{2}) UTC`)

// parseResults reads a results file as report.markdown writes it.
func parseResults(name string, data []byte) resultsFile {
	f := resultsFile{name: name}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := measuredRe.FindStringSubmatch(line); m != nil && f.measured.IsZero() {
			f.measured, _ = time.Parse("2006-01-02 15:04", m[1])
		}
		switch {
		case strings.HasPrefix(line, "## "):
			section = strings.TrimPrefix(line, "## ")
		case strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| ---"):
			cells := strings.Split(strings.Trim(line, "|"), " | ")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			f.rows = append(f.rows, resultRow{section, cells})
		}
	}
	return f
}

// find is the row of h in f, if f has it.
func (f resultsFile) find(h headline) (resultRow, bool) {
	for _, r := range f.rows {
		if strings.HasPrefix(r.section, h.section) && len(r.cells) >= 4 && strings.HasPrefix(r.cells[0], h.row) {
			return r, true
		}
	}
	return resultRow{}, false
}

// verdict is the part of a row's note that says how the figure stands
// against its floor and goal.
func verdict(note string) string {
	var keep []string
	for _, part := range strings.Split(note, "; ") {
		if strings.Contains(part, "× the floor") || strings.HasPrefix(part, "goal ") {
			keep = append(keep, part)
		}
	}
	return strings.Join(keep, "; ")
}

// figuresTable renders the headlines from the newest results file that
// holds each; one not measured in any says so.
func figuresTable(files []resultsFile) string {
	var b strings.Builder
	b.WriteString("| figure | measured | floor | against the floor | results |\n| --- | --: | --: | --- | --- |\n")
	for _, h := range headlines {
		var best *resultsFile
		var row resultRow
		for i := range files {
			if r, ok := files[i].find(h); ok && (best == nil || files[i].measured.After(best.measured)) {
				best, row = &files[i], r
			}
		}
		if best == nil {
			fmt.Fprintf(&b, "| %s | not measured yet | | | |\n", h.label)
			continue
		}
		floor, note := row.cells[2], verdict(row.cells[3])
		if h.section == "Artifacts" {
			floor, note = "", ""
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | [%s](bench/%s), %s |\n", h.label, row.cells[1], floor, note,
			strings.TrimSuffix(best.name, ".md"), best.name, best.measured.Format("2006-01-02"))
	}
	return b.String()
}

// writeSummary rewrites the figures table of readme from every results
// file in benchDir. A README without the markers is left alone, and
// the reason returned.
func writeSummary(readme, benchDir string) error {
	names, err := filepath.Glob(filepath.Join(benchDir, "results*.md"))
	if err != nil {
		return err
	}
	var files []resultsFile
	for _, p := range names {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, parseResults(filepath.Base(p), data))
	}
	data, err := os.ReadFile(readme)
	if err != nil {
		return err
	}
	out, err := replaceBetween(string(data), figuresBegin, figuresEnd, figuresTable(files))
	if err != nil {
		return fmt.Errorf("%s: %w", readme, err)
	}
	return atomicfile.WriteFile(readme, []byte(out), 0o644, nil)
}

// replaceBetween puts body between the lines begin and end of text.
func replaceBetween(text, begin, end, body string) (string, error) {
	i := strings.Index(text, begin+"\n")
	j := strings.Index(text, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("no figures table: want a line %q, the table, then %q", begin, end)
	}
	return text[:i+len(begin)+1] + body + text[j:], nil
}
