package timeline

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
	"time"
)

// Row is one boot: its steps, or for a floor the plain boot it is
// measured against.
type Row struct {
	Name  string
	Floor bool
	Marks []Mark
}

// End is the row's last mark.
func (r Row) End() time.Duration {
	if len(r.Marks) == 0 {
		return 0
	}
	return r.Marks[len(r.Marks)-1].At
}

// Chart is the boots of one benchmark part; Steps give each step its
// colour and the table its order.
type Chart struct {
	Title string
	Note  string // a line under the title
	Steps []Step
	Rows  []Row
}

// bar is one step of a row: from the mark before it to its own.
type bar struct {
	step       string
	start, end time.Duration
}

func (r Row) bars() []bar {
	var out []bar
	var prev time.Duration
	for _, m := range r.Marks {
		out = append(out, bar{step: m.Step, start: prev, end: m.At})
		prev = m.At
	}
	return out
}

func (b bar) label() string {
	return fmt.Sprintf("%s %s", b.step, seconds(b.end-b.start))
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// Table lists, for each step any row shows (in Steps order), its time
// since power-on in every row, as Markdown.
func (c Chart) Table() string {
	var b strings.Builder
	b.WriteString("| step |")
	for _, r := range c.Rows {
		fmt.Fprintf(&b, " %s |", cell(r.Name))
	}
	b.WriteString("\n| --- |" + strings.Repeat(" --: |", len(c.Rows)) + "\n")
	for _, name := range c.stepNames() {
		fmt.Fprintf(&b, "| %s |", cell(name))
		for _, r := range c.Rows {
			fmt.Fprintf(&b, " %s |", r.at(name))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// stepNames are the steps at least one row shows, in Steps order, then
// any step not in Steps.
func (c Chart) stepNames() []string {
	var names []string
	seen := func(name string) bool {
		return slices.ContainsFunc(c.Rows, func(r Row) bool { return r.at(name) != "" })
	}
	for _, s := range c.Steps {
		if !slices.Contains(names, s.Name) && seen(s.Name) {
			names = append(names, s.Name)
		}
	}
	for _, r := range c.Rows {
		for _, m := range r.Marks {
			if !slices.Contains(names, m.Step) {
				names = append(names, m.Step)
			}
		}
	}
	return names
}

func (r Row) at(step string) string {
	for _, m := range r.Marks {
		if m.Step == step {
			return seconds(m.At)
		}
	}
	return ""
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// The drawing, in pixels.
const (
	width      = 1000
	nameRight  = 250 // the row names end here
	axisLeft   = 260
	axisRight  = 920 // room after it for a row's total
	barHeight  = 20
	laneHeight = 15
	rowGap     = 14
	charWidth  = 6.2 // of an 11 px label, on average
	swatch     = 9
	floorFill  = "#d9d9d9"
)

// SVG draws one row of bars per boot on a shared time axis. Each bar is
// labelled with its step and length: inside the bar when it fits,
// otherwise under the row, in the first free lane.
func (c Chart) SVG() []byte {
	step, axisMax := ticks(c.end())
	scale := float64(axisRight-axisLeft) / axisMax
	var body bytes.Buffer
	y := 76.0
	for _, r := range c.Rows {
		y += c.row(&body, r, y, scale)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" viewBox="0 0 %d %.0f" font-family="sans-serif" font-size="11">`+"\n",
		width, y, width, y)
	fmt.Fprintf(&b, `<rect width="%d" height="%.0f" fill="#fff"/>`+"\n", width, y)
	fmt.Fprintf(&b, `<text x="10" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", esc(c.Title))
	fmt.Fprintf(&b, `<text x="10" y="42" fill="#444">%s</text>`+"\n", esc(c.Note))
	for t := 0.0; t <= axisMax+step/2; t += step {
		x := axisLeft + t*scale
		fmt.Fprintf(&b, `<line x1="%.1f" y1="62" x2="%.1f" y2="%.0f" stroke="#e4e4e4"/>`+"\n", x, x, y-rowGap/2)
		fmt.Fprintf(&b, `<text x="%.1f" y="58" text-anchor="middle" fill="#666">%.0f s</text>`+"\n", x, t)
	}
	b.Write(body.Bytes())
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// row draws r with its bar's top at y and returns the height it took.
func (c Chart) row(b *bytes.Buffer, r Row, y, scale float64) float64 {
	name := r.Name
	if r.Floor {
		name += " (floor)"
	}
	fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", nameRight, y+14, esc(name))
	if len(r.Marks) == 0 {
		fmt.Fprintf(b, `<text x="%d" y="%.1f" fill="#888">no step seen on the console</text>`+"\n", axisLeft, y+14)
		return barHeight + rowGap
	}
	var lanes []float64 // where each lane's last label ends
	for _, br := range r.bars() {
		x0, x1 := axisLeft+br.start.Seconds()*scale, axisLeft+br.end.Seconds()*scale
		fill := c.colour(br.step, r.Floor)
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s" stroke="#fff"><title>%s: %s to %s</title></rect>`+"\n",
			x0, y, x1-x0, barHeight, fill, esc(br.step), seconds(br.start), seconds(br.end))
		label := br.label()
		w := float64(len([]rune(label))) * charWidth
		if w+6 <= x1-x0 {
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x0+3, y+14, esc(label))
			continue
		}
		x := math.Min(x0, width-5-w-swatch-3)
		lane := freeLane(&lanes, x, x+swatch+3+w)
		ly := y + barHeight + float64(lane+1)*laneHeight
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%d" height="%d" fill="%s" stroke="#999" stroke-width="0.5"/>`+"\n", x, ly-swatch, swatch, swatch, fill)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x+swatch+3, ly, esc(label))
	}
	end := axisLeft + r.End().Seconds()*scale
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-weight="bold">%s</text>`+"\n", end+4, y+14, seconds(r.End()))
	return barHeight + float64(len(lanes))*laneHeight + rowGap
}

// freeLane returns the first lane whose labels end before from, adding
// one when none does, and marks it taken up to to.
func freeLane(lanes *[]float64, from, to float64) int {
	for i, end := range *lanes {
		if end+8 <= from {
			(*lanes)[i] = to
			return i
		}
	}
	*lanes = append(*lanes, to)
	return len(*lanes) - 1
}

// colour is the step's by its place in Steps: ColorBrewer's Set3 without
// its grey, which marks floors, then Pastel1's and Pastel2's others.
func (c Chart) colour(step string, floor bool) string {
	palette := [...]string{"#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
		"#b3de69", "#fccde5", "#bc80bd", "#ccebc5", "#ffed6f",
		"#fbb4ae", "#b3cde3", "#decbe4", "#fed9a6", "#e5d8bd", "#fddaec", "#b3e2cd", "#cbd5e8"}
	i := slices.IndexFunc(c.Steps, func(s Step) bool { return s.Name == step })
	if floor || i < 0 {
		return floorFill
	}
	return palette[i%len(palette)]
}

func (c Chart) end() time.Duration {
	var end time.Duration
	for _, r := range c.Rows {
		end = max(end, r.End())
	}
	return end
}

// ticks picks a round tick step giving at most ten ticks up to end, and
// the axis's end: end rounded up to a tick.
func ticks(end time.Duration) (step, axisMax float64) {
	s := end.Seconds()
	for _, step = range []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600} {
		if s/step <= 10 {
			break
		}
	}
	return step, max(step, math.Ceil(s/step)*step)
}

func esc(s string) string { return html.EscapeString(s) }
