// Command kiln-bench measures kiln's build and boot times on this machine
// and writes them, each beside its floor measured in the same run, to a
// Markdown results file. `make bench` runs it; it takes 30-45 minutes
// under TCG.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func main() {
	var opts options
	flag.StringVar(&opts.kiln, "kiln", "bin/kiln", "the kiln binary to benchmark")
	flag.StringVar(&opts.out, "out", "out", "a built image (make image), booted by the boot benchmarks")
	flag.StringVar(&opts.cache, "cache", os.Getenv("KILN_CACHE"), "the warm cache; the cold build uses an empty one")
	flag.StringVar(&opts.results, "results", "bench/results.md", "where the figures go")
	flag.BoolVar(&opts.skipCold, "skip-cold", false, "skip the cold build (it downloads every package again)")
	flag.StringVar(&opts.only, "only", "", "run only these benchmarks, comma-separated: builds, floor, sizes, boots, genesis")
	flag.Parse()
	if err := run(context.Background(), opts); err != nil {
		fmt.Fprintln(os.Stderr, "kiln-bench:", err)
		os.Exit(1)
	}
}

type options struct {
	kiln, out, cache, results, only string
	skipCold                        bool
}

func run(ctx context.Context, o options) error {
	work, err := os.MkdirTemp("", "kiln-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	r := &report{started: time.Now()}
	for _, m := range []struct {
		name string
		run  func(context.Context, options, string, *report) error
	}{
		{"builds", benchBuilds}, {"floor", benchFloor}, {"sizes", benchSizes}, {"boots", benchBoots}, {"genesis", benchGenesis},
	} {
		if o.only != "" && !slices.Contains(strings.Split(o.only, ","), m.name) {
			continue
		}
		if err := m.run(ctx, o, work, r); err != nil {
			return err
		}
		if err := r.write(o.results); err != nil { // keep what is measured so far
			return err
		}
	}
	fmt.Println("results in", o.results)
	return nil
}

func abs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}
