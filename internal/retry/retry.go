// Package retry owns kiln's waiting: the one bounded wait (Wait) that
// tries a check again until it passes, fails for good (Final) or its bound
// passes, and says every Report what it still waits for. The node roles,
// the cluster checks, the image bake, the operator's tools, the QEMU tests
// and the bench wait through it rather than through loops of their own.
package retry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Logf prints a progress line.
type Logf func(format string, args ...any)

// Interval is how often a wait tries again, and Report how often it says
// what it still waits for.
const (
	Interval = 2 * time.Second
	Report   = 30 * time.Second
)

// NoBound is the bound of a wait that goes on until its check passes or
// fails for good: only for waits whose way out the console names (a
// machine to power on, a path to fix), never for one a retry cannot end.
const NoBound = time.Duration(1<<63 - 1)

// ErrFinal marks a check error that no retry can fix: the wait stops at
// once and returns it.
var ErrFinal = errors.New("final")

// Final wraps err so that Wait stops on it.
func Final(err error) error { return fmt.Errorf("%w: %w", ErrFinal, err) }

// Wait calls check until it returns nil, returns an error wrapping
// ErrFinal, ctx ends or bound passes, trying every Interval. Every Report
// it logs what it waits for with the last error (log may be nil: a quiet
// wait). The error it returns names what it waited for and wraps the last
// check error.
func Wait(ctx context.Context, what string, bound time.Duration, log Logf, check func(context.Context) error) error {
	return WaitEvery(ctx, what, bound, Interval, log, check)
}

// WaitEvery is Wait trying every interval instead: for waits on the
// machine itself (a socket, a device) that pass within moments. A bound
// of 0 (or less) is one try, with ctx as it is: a poll bounded by 0
// would hand that try a context already ended.
func WaitEvery(ctx context.Context, what string, bound, interval time.Duration, log Logf, check func(context.Context) error) error {
	start, lastReport := time.Now(), time.Now()
	var last error
	poll := wait.PollUntilContextTimeout
	if bound <= 0 {
		bound = 0
		poll = func(ctx context.Context, _, _ time.Duration, _ bool, cond wait.ConditionWithContextFunc) error {
			done, err := cond(ctx)
			if err == nil && !done {
				err = context.DeadlineExceeded
			}
			return err
		}
	}
	err := poll(ctx, interval, bound, true, func(ctx context.Context) (bool, error) {
		last = check(ctx)
		if last == nil {
			return true, nil
		}
		if errors.Is(last, ErrFinal) {
			return false, last
		}
		if log != nil && time.Since(lastReport) >= Report {
			lastReport = time.Now()
			log("waiting for %s (%s so far; last: %s)", what, time.Since(start).Round(time.Second), OneLine(last))
		}
		return false, nil
	})
	switch {
	case err == nil:
		if log != nil {
			log("%s: after %s", what, time.Since(start).Round(time.Second))
		}
		return nil
	case errors.Is(err, ErrFinal):
		return fmt.Errorf("%s: %w", what, err)
	}
	if bound == NoBound { // ctx ended
		bound = time.Since(start).Round(time.Second)
	}
	switch {
	case last == nil:
		return fmt.Errorf("%s: gave up after %s: %w", what, bound, err)
	default:
		return fmt.Errorf("%s: gave up after %s: %w", what, bound, last)
	}
}

// OneLine is an error's text on one line, for console lines.
func OneLine(err error) string {
	if err == nil {
		return "not yet"
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}

// Times calls try up to n times (attempt counts from 1), pausing between
// two calls, until it returns nil or ctx ends: for an action that is
// tried a fixed number of times rather than until a deadline. It returns
// nil once try does, else every attempt's error joined (try's errors
// should say which attempt they were), ctx's last when it ended.
func Times(ctx context.Context, n int, pause time.Duration, try func(ctx context.Context, attempt int) error) error {
	var errs []error
	for attempt := 1; attempt <= n; attempt++ {
		err := try(ctx, attempt)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
		if attempt < n {
			select {
			case <-ctx.Done():
				return errors.Join(append(errs, ctx.Err())...)
			case <-time.After(pause):
			}
		}
	}
	return errors.Join(errs...)
}
