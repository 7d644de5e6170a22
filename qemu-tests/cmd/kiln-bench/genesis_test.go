package main

import (
	"testing"
	"time"
)

func TestMedianCut(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name  string
		ready []time.Duration
		want  int // the cut's n
		note  string
	}{
		{"one", []time.Duration{66 * s}, 1, "one power cut"},
		{"three", []time.Duration{70 * s, 62 * s, 66 * s}, 3, "median of 3 power cuts in a row (70.0 s, 62.0 s, 66.0 s)"},
		{"even: the lower middle", []time.Duration{70 * s, 62 * s, 66 * s, 64 * s}, 4, "median of 4 power cuts in a row (70.0 s, 62.0 s, 66.0 s, 64.0 s)"},
		{"ties keep the order they ran", []time.Duration{66 * s, 66 * s, 66 * s}, 2, "median of 3 power cuts in a row (66.0 s, 66.0 s, 66.0 s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cuts []restore
			for i, r := range tc.ready {
				cuts = append(cuts, restore{n: i + 1, ready: r})
			}
			if got := medianCut(cuts); got.n != tc.want {
				t.Errorf("median is cut %d (%s), want cut %d", got.n, got.ready, tc.want)
			}
			if got := cutsNote(cuts, readyOf); got != tc.note {
				t.Errorf("note %q, want %q", got, tc.note)
			}
			if cuts[0].n != 1 {
				t.Error("medianCut reordered its argument")
			}
		})
	}
}

// The healthy row's median is its own: run 39's cuts had the apiserver
// healthy at 214.3, 206.7 and 183.5 s and Ready at 113.4, 127.9 and
// 124.0 s, and the row showed the Ready-median cut's 183.5 s.
func TestMedianOfAFigure(t *testing.T) {
	ms := time.Millisecond
	cuts := []restore{{n: 1, healthy: 214300 * ms, ready: 113400 * ms}, {n: 2, healthy: 206700 * ms, ready: 127900 * ms}, {n: 3, healthy: 183500 * ms, ready: 124000 * ms}}
	if got := median(cuts, healthyOf); got != 206700*ms {
		t.Errorf("median healthy %s, want 206.7s", got)
	}
	if got := medianCut(cuts); got.n != 3 {
		t.Errorf("median Ready is cut %d, want 3", got.n)
	}
	if got := median(cuts[:2], healthyOf); got != 206700*ms {
		t.Errorf("median of two: %s, want the lower 206.7s", got)
	}
}
