package main

import (
	"slices"
	"strings"
	"testing"
)

func TestRecapFindsTheFailureBeforeTheCleanups(t *testing.T) {
	log := `=== RUN   TestCluster
    cluster_test.go:10: w1 re-imaged
    lifecycle_test.go:99: kiln node remove m2: exit status 1
    helpers_test.go:5: ` + EndMarker + `
    timeline_test.go:40: Ready timeline
    timeline_test.go:41: | m1 | 300 s |
=== RUN   TestBoot
=== PAUSE TestBoot
=== RUN   TestOther
    other_test.go:3: fine
--- PASS: TestOther (1.00s)
=== CONT  TestBoot
    boot_test.go:7: power-on to done: 1m
=== NAME  TestCluster
    cluster_test.go:200: a cleanup line after the marker
--- FAIL: TestCluster (2466.18s)
    --- PASS: TestCluster/joined (0.00s)
=== NAME  TestBoot
    boot_test.go:9: console: no done line
--- FAIL: TestBoot (60.00s)
FAIL
`
	order, lines, err := recap(strings.NewReader(log), 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"TestCluster", "TestBoot"}; !slices.Equal(order, want) {
		t.Fatalf("failed tests %v, want %v", order, want)
	}
	for name, want := range map[string][]string{
		"TestCluster": {"    cluster_test.go:10: w1 re-imaged", "    lifecycle_test.go:99: kiln node remove m2: exit status 1"},
		"TestBoot":    {"    boot_test.go:7: power-on to done: 1m", "    boot_test.go:9: console: no done line"},
	} {
		if !slices.Equal(lines[name], want) {
			t.Errorf("%s: recap %q, want %q", name, lines[name], want)
		}
	}
}

func TestRecapOfAPassingLogIsEmpty(t *testing.T) {
	order, _, err := recap(strings.NewReader("=== RUN   TestA\n    a_test.go:1: ok\n--- PASS: TestA (0.00s)\nPASS\n"), 5)
	if err != nil || len(order) != 0 {
		t.Fatalf("recap of a passing log: %v %v", order, err)
	}
}
