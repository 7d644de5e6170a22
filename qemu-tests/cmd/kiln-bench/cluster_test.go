package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRatioRow(t *testing.T) {
	floor := 60 * time.Second
	for _, c := range []struct {
		d    time.Duration
		goal float64
		want string
	}{
		{360 * time.Second, 6, "6.00× the floor; goal ≤ 6×: met"},
		{361 * time.Second, 6, "6.02× the floor; goal ≤ 6×: **not met**"},
		{90 * time.Second, 0, "1.50× the floor"},
	} {
		r := ratioRow("x", c.d, floor, c.goal, "")
		if r.note != c.want || r.value != secs(c.d) || r.floor != "60.0 s" {
			t.Errorf("ratioRow(%s, goal %g) = %+v, want note %q", c.d, c.goal, r, c.want)
		}
	}
	if r := ratioRow("x", time.Minute, floor, 4, "n"); !strings.HasSuffix(r.note, "met; n") {
		t.Errorf("note %q, want the extra note last", r.note)
	}
}

// The machines are the QEMU scenario's, in its order: m1 first.
func TestClusterNodes(t *testing.T) {
	var got []string
	for _, n := range clusterNodes() {
		got = append(got, fmt.Sprintf("%s %s %s %d vCPU %d MiB", n.Name, n.Role, n.MAC, n.CPUs, n.MemoryMiB))
	}
	want := []string{
		"m1 genesis 52:54:00:77:00:11 1 vCPU 3072 MiB",
		"m2 master 52:54:00:77:00:12 1 vCPU 3072 MiB",
		"w1 worker 52:54:00:77:00:21 1 vCPU 2048 MiB",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
