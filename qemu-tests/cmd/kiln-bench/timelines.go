package main

import (
	"github.com/kiln-project/kiln/qemu-tests/console"
	"github.com/kiln-project/kiln/qemu-tests/timeline"
)

// stepsRow is a measured boot's row of a timeline: the agent's and the
// role's steps on its console.
func stepsRow(name string, lines []console.Line) timeline.Row {
	return timeline.Row{Name: name, Marks: timeline.Extract(timeline.Steps(), lines)}
}

// floorRow is a plain boot's row: the kernel, then the login prompt.
func floorRow(name string, lines []console.Line) timeline.Row {
	return timeline.Row{Name: name, Floor: true, Marks: timeline.Extract(timeline.FloorSteps(), lines)}
}
