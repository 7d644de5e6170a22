package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestMedianSpread(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name        string
		in          []time.Duration
		mid, lo, hi time.Duration
	}{
		{"none", nil, 0, 0, 0},
		{"one", []time.Duration{5 * s}, 5 * s, 5 * s, 5 * s},
		{"three, unsorted", []time.Duration{70 * s, 62 * s, 66 * s}, 66 * s, 62 * s, 70 * s},
		{"even: the lower middle", []time.Duration{70 * s, 62 * s, 66 * s, 64 * s}, 64 * s, 62 * s, 70 * s},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]time.Duration(nil), tc.in...)
			mid, lo, hi := medianSpread(in)
			if mid != tc.mid || lo != tc.lo || hi != tc.hi {
				t.Errorf("medianSpread(%v) = %v, %v, %v, want %v, %v, %v", tc.in, mid, lo, hi, tc.mid, tc.lo, tc.hi)
			}
			for i := range in {
				if in[i] != tc.in[i] {
					t.Fatalf("medianSpread reordered its argument: %v", in)
				}
			}
		})
	}
}

// rollAt is a roll whose instants are seconds after t0: kiln upgrade
// started at 0, the node's answer at staged, its gate line at gate
// (tried seconds after the trying boot's power-on), the command's exit
// at end.
func rollAt(n int, onto string, staged, gate, tried, end float64) roll {
	t0 := time.Date(2026, 12, 8, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	return roll{n: n, onto: onto, slot: []string{"b", "a", "b"}[(n-1)%3], start: t0, staged: at(staged), gate: at(gate),
		tryingGate: time.Duration(tried * float64(time.Second)), end: at(end), nodeStage: "40s"}
}

// Each row is the median of the rolls, with every roll's figure in the
// order they ran and the spread in its note, beside the floor.
func TestUpgradeRows(t *testing.T) {
	rolls := []roll{
		rollAt(1, "v2", 90, 300, 170, 320),
		rollAt(2, "v1", 80, 280, 160, 310),
		rollAt(3, "v2", 100, 330, 190, 335),
	}
	rows := upgradeRows(rolls, 40*time.Second)
	for _, tc := range []struct {
		what, value, note string
	}{
		{"**staging**", "90.0 s", "2.25× the floor; median of 3 rolls (v2 90.0 s, v1 80.0 s, v2 100.0 s), spread 80.0–100.0 s; " +
			"the plan, the node's upgrade service seeing the ask, its fetch, write and read-back of the build (by its own count: 40s, 40s, 40s)"},
		{"**reboot to gate**", "210.0 s", "5.25× the floor; median of 3 rolls (v2 210.0 s, v1 200.0 s, v2 230.0 s), spread 200.0–230.0 s; "},
		{"trying boot", "170.0 s", "4.25× the floor; median of 3 rolls (v2 170.0 s, v1 160.0 s, v2 190.0 s), spread 160.0–190.0 s"},
		{"reboot to the rollout's end", "230.0 s", "5.75× the floor; median of 3 rolls (v2 230.0 s, v1 230.0 s, v2 235.0 s), spread 230.0–235.0 s; "},
		{"rollout", "320.0 s", "8.00× the floor; median of 3 rolls (v2 320.0 s, v1 310.0 s, v2 335.0 s), spread 310.0–335.0 s"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			var got *row
			for i := range rows {
				if strings.HasPrefix(rows[i].what, tc.what) {
					got = &rows[i]
				}
			}
			switch {
			case got == nil:
				t.Fatalf("no row starts %q", tc.what)
			case got.value != tc.value:
				t.Errorf("value %q, want %q", got.value, tc.value)
			case got.floor != "40.0 s":
				t.Errorf("floor %q, want 40.0 s", got.floor)
			case !strings.HasPrefix(got.note, tc.note):
				t.Errorf("note %q, want it to start %q", got.note, tc.note)
			case strings.Contains(got.what+got.note, " | "):
				t.Errorf("row %q holds a table cell separator", got.what)
			}
		})
	}
}

// The README's headlines find the part's rows in the results as
// report.markdown writes them.
func TestUpgradeHeadlinesFindTheRows(t *testing.T) {
	rolls := []roll{rollAt(1, "v2", 90, 300, 170, 320), rollAt(2, "v1", 80, 280, 160, 310), rollAt(3, "v2", 100, 330, 190, 335)}
	md := results(t, time.Date(2026, 12, 8, 10, 0, 0, 0, time.UTC), section{title: upgradeTitle, head: upgradeHead, rows: upgradeRows(rolls, 40*time.Second)})
	f := parseResults("results-upgrade.md", []byte(md))
	found := 0
	for _, h := range headlines {
		if h.section != "Upgrade (" {
			continue
		}
		found++
		r, ok := f.find(h)
		if !ok {
			t.Errorf("headline %q: no row in\n%s", h.label, md)
			continue
		}
		if got := verdict(r.cells[3]); !strings.HasSuffix(got, "× the floor") {
			t.Errorf("headline %q: verdict %q, want the ratio to the floor", h.label, got)
		}
	}
	if found != 2 {
		t.Errorf("%d upgrade headlines, want staging and reboot to gate", found)
	}
}

func TestMedianRoll(t *testing.T) {
	for _, tc := range []struct {
		name  string
		gates []float64 // each roll's gate line, its answer at 0
		want  int
	}{
		{"one", []float64{200}, 1},
		{"three", []float64{230, 200, 210}, 3},
		{"ties keep the order they ran", []float64{210, 210, 210}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rolls []roll
			for i, g := range tc.gates {
				rolls = append(rolls, rollAt(i+1, "v2", 0, g, g, g))
			}
			if got := medianRoll(rolls); got.n != tc.want {
				t.Errorf("median is roll %d, want roll %d", got.n, tc.want)
			}
		})
	}
}

// The node's lines, as firstboot's upgrade service, boot-slot check and
// trial print them, are matched for their own slot only.
func TestRollLines(t *testing.T) {
	for _, tc := range []struct {
		name string
		re   func(string) *regexp.Regexp
		line string
		slot string
		want bool
	}{
		{"staged", stagedLine, "upgrade: request m1-5f2c: staged v1.37.1+kiln.0123456789ab on slot b in 41s", "b", true},
		{"staged, the other slot", stagedLine, "upgrade: request m1-5f2c: staged v1.37.1+kiln.0123456789ab on slot b in 41s", "a", false},
		{"rebooting", rebootingLine, "upgrade: request m1-5f2c: rebooting to try slot a once", "a", true},
		{"rebooting, the other slot", rebootingLine, "upgrade: request m1-5f2c: rebooting to try slot a once", "b", false},
		{"trying", tryingLine, "kiln-firstboot: slot b: trying its image once: the role's health gate marks it good, or it is failed 20m0s after the boot", "b", true},
		{"the active slot is not a trying boot", tryingLine, "kiln-firstboot: slot b: booted the active slot", "b", false},
		{"gate", gateLine, "kiln-firstboot: kiln: slot b (v1.37.1+kiln.0123456789ab) passed the health gate and is now the active slot", "b", true},
		{"gate, the other slot", gateLine, "kiln-firstboot: kiln: slot b (v1.37.1+kiln.0123456789ab) passed the health gate and is now the active slot", "a", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.re(tc.slot).MatchString(tc.line); got != tc.want {
				t.Errorf("%s matches %q: %v, want %v", tc.re(tc.slot), tc.line, got, tc.want)
			}
		})
	}
	m := stagedLine("b").FindStringSubmatch("upgrade: request m1-5f2c: staged v1.37.1+kiln.0123456789ab on slot b in 1m5s")
	if len(m) != 2 || m[1] != "1m5s" {
		t.Errorf("the node's own stage time: %q, want 1m5s", m)
	}
}

func TestUpgradeV2Dir(t *testing.T) {
	for out, want := range map[string]string{
		"out":       "out-upgrade-v2",
		"out/":      "out-upgrade-v2",
		"/work/out": "/work/out-upgrade-v2",
	} {
		if got := upgradeV2Dir(out); got != want {
			t.Errorf("upgradeV2Dir(%q) = %q, want %q", out, got, want)
		}
	}
}

// Without make upgrade-images' build the part stops before it boots
// anything, saying what to run.
func TestUpgradeTargetsNeedTheV2Build(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	_, err := upgradeTargets(out)
	if err == nil {
		t.Fatal("no error without the v2 build")
	}
	for _, want := range []string{"make upgrade-images", out + "-upgrade-v2", "node.manifest.json"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}
