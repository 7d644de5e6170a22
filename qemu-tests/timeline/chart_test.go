package timeline

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/internal/golden"
	"github.com/kiln-project/kiln/qemu-tests/console"
)

// readConsole reads a fixture: one "<seconds since power-on> <line>" per line.
func readConsole(t *testing.T, name string) []console.Line {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []console.Line
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		at, text, _ := strings.Cut(sc.Text(), " ")
		s, err := strconv.ParseFloat(at, 64)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, console.Line{At: time.Duration(s * float64(time.Second)), Text: text})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func exampleChart(t *testing.T) Chart {
	return Chart{
		Title: "Example from the test fixture (made-up times): genesis",
		Note:  "qemu-tests/timeline/testdata/*.console; make bench draws bench/timeline-<part>.svg from real boots",
		Steps: Steps(),
		Rows: []Row{
			{Name: "plain ISO boot, agent masked", Floor: true, Marks: Extract(FloorSteps(), readConsole(t, "floor.console"))},
			{Name: "first boot: bootstrap", Marks: Extract(Steps(), readConsole(t, "genesis.console"))},
			{Name: "after a power cut: restored", Marks: Extract(Steps(), readConsole(t, "restored.console"))},
			{Name: "a boot that printed nothing"},
		},
	}
}

func TestSVG(t *testing.T) {
	golden.Check(t, filepath.Join("testdata", "example.svg"), exampleChart(t).SVG())
}

func TestTable(t *testing.T) {
	golden.Check(t, filepath.Join("testdata", "example.md"), []byte(exampleChart(t).Table()))
}

func TestSVGIsTheSameEveryTime(t *testing.T) {
	c := exampleChart(t)
	if a, b := string(c.SVG()), string(c.SVG()); a != b {
		t.Error("two renderings of one chart differ")
	}
}

func TestTicks(t *testing.T) {
	for _, tc := range []struct {
		end           time.Duration
		step, axisMax float64
	}{
		{0, 1, 1},
		{7 * time.Second, 1, 7},
		{51400 * time.Millisecond, 10, 60},
		{343700 * time.Millisecond, 60, 360},
		{18 * time.Minute, 120, 1080},
	} {
		if step, axisMax := ticks(tc.end); step != tc.step || axisMax != tc.axisMax {
			t.Errorf("ticks(%s) = %g, %g; want %g, %g", tc.end, step, axisMax, tc.step, tc.axisMax)
		}
	}
}
