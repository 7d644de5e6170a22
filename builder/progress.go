package builder

import (
	"context"
	"fmt"
	"io"
	"time"
)

// step is one stage of the build pipeline.
type step struct {
	name string
	run  func(b *build, ctx context.Context) error
	skip func(b *build) bool // nil: always run
}

// runSteps runs the pipeline in order, printing each step's number, name
// and duration, and wraps a failure with the step's name.
func runSteps(ctx context.Context, b *build, steps []step, w io.Writer, now func() time.Time) error {
	for i, s := range steps {
		prefix := fmt.Sprintf("[%d/%d] %s", i+1, len(steps), s.name)
		if s.skip != nil && s.skip(b) {
			fmt.Fprintf(w, "%s: skipped\n", prefix)
			continue
		}
		fmt.Fprintf(w, "%s ...\n", prefix)
		start := now()
		if err := s.run(b, ctx); err != nil {
			fmt.Fprintf(w, "%s: failed after %s\n", prefix, since(now, start))
			return fmt.Errorf("step %q: %w", s.name, err)
		}
		fmt.Fprintf(w, "%s: done in %s\n", prefix, since(now, start))
	}
	return nil
}

func since(now func() time.Time, start time.Time) string {
	return now().Sub(start).Round(100 * time.Millisecond).String()
}
