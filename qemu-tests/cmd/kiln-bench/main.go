// Command kiln-bench measures kiln's build and boot times on this machine
// and writes them, each beside its floor measured in the same run, to a
// Markdown results file, with a timeline per part beside it
// (timeline-<part>.svg: the steps each measured boot printed). `make
// bench` runs it; it takes 30-45 minutes under TCG, and more with the
// cluster part (three VMs at once) and the upgrade part (three rolls of a
// node by kiln upgrade).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kiln-project/kiln/gen/site"
)

func main() {
	var opts options
	flag.StringVar(&opts.kiln, "kiln", "bin/kiln", "the kiln binary to benchmark")
	flag.StringVar(&opts.out, "out", "out", "a built image (make image), booted by the boot benchmarks")
	flag.StringVar(&opts.cache, "cache", os.Getenv("KILN_CACHE"), "the warm cache; the cold build uses an empty one")
	flag.StringVar(&opts.results, "results", "bench/results.md", "where the figures go")
	flag.BoolVar(&opts.skipCold, "skip-cold", false, "skip the cold build (it downloads every package again)")
	flag.StringVar(&opts.only, "only", "", "run only these benchmarks, comma-separated: builds, floor, sizes, boots, genesis, cluster, upgrade")
	flag.StringVar(&opts.bootPaths, "boot", "", "run only the boot paths whose name contains this, e.g. \"kiln serve\"")
	flag.IntVar(&opts.restores, "genesis-restores", 3, "power cuts in a row in the genesis part; it reports the median")
	flag.StringVar(&opts.genesisTiming, "genesis-timing", site.TimingDefault, "the genesis part's timing profile (cluster.timing): "+strings.Join(site.Timings, " or ")+
		"; on a host whose plain boot takes a minute the default lets the controller-manager lose its lease again and again")
	flag.StringVar(&opts.readme, "readme", "README.md", "the README whose figures table is written from the results files beside -results")
	flag.BoolVar(&opts.summaryOnly, "summary-only", false, "only write the README's figures table from the results files there are")
	flag.Parse()
	if !slices.Contains(site.Timings, opts.genesisTiming) {
		fmt.Fprintf(os.Stderr, "kiln-bench: -genesis-timing %q: must be %s\n", opts.genesisTiming, strings.Join(site.Timings, " or "))
		os.Exit(2)
	}
	// The KVM probe boots the image's own kernel (vm.ProbeKernel).
	if os.Getenv("KILN_OUT") == "" {
		os.Setenv("KILN_OUT", opts.out)
	}
	// A first interrupt ends the waits, so the parts still power their
	// VMs off and the cluster part removes its network namespace; a
	// second one kills the bench at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }()
	err := run(ctx, opts)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kiln-bench:", err)
		os.Exit(1)
	}
}

type options struct {
	kiln, out, cache, results, only string
	genesisTiming, readme           string
	bootPaths                       string
	skipCold, summaryOnly           bool
	restores                        int
}

func run(ctx context.Context, o options) error {
	if o.summaryOnly {
		return writeSummary(o.readme, filepath.Dir(o.results))
	}
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
		{"cluster", benchCluster}, {"upgrade", benchUpgrade},
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
	if err := writeSummary(o.readme, filepath.Dir(o.results)); err != nil {
		return fmt.Errorf("the README's figures: %w", err)
	}
	fmt.Println("figures table in", o.readme)
	return nil
}

func abs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}
