package retry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestWaitPassesAtOnce(t *testing.T) {
	var lines []string
	log := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	calls := 0
	err := Wait(context.Background(), "the thing", time.Second, log, func(context.Context) error {
		calls++
		return nil
	})
	if err != nil || calls != 1 {
		t.Fatalf("Wait = %v after %d calls, want nil after 1", err, calls)
	}
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "the thing: after ") {
		t.Errorf("log = %q, want one line saying what it waited for", lines)
	}
}

func TestWaitStopsOnFinal(t *testing.T) {
	calls := 0
	err := Wait(context.Background(), "the thing", time.Minute, nil, func(context.Context) error {
		calls++
		return Final(errors.New("broken for good"))
	})
	if calls != 1 || !errors.Is(err, ErrFinal) {
		t.Fatalf("Wait = %v after %d calls, want a final error after 1", err, calls)
	}
	if want := "the thing: final: broken for good"; err.Error() != want {
		t.Errorf("Wait = %q, want %q", err, want)
	}
}

func TestWaitGivesUpWithTheLastError(t *testing.T) {
	last := errors.New("not\nyet")
	err := Wait(context.Background(), "the thing", 50*time.Millisecond, nil, func(context.Context) error { return last })
	if !errors.Is(err, last) {
		t.Fatalf("Wait = %v, want it to wrap the last check error", err)
	}
	if !strings.HasPrefix(err.Error(), "the thing: gave up after 50ms: ") {
		t.Errorf("Wait = %q, want it to name the wait and its bound", err)
	}
}

func TestWaitWithNoBoundEndsWithCtx(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := Wait(ctx, "the thing", NoBound, nil, func(context.Context) error { return errors.New("no") })
	if err == nil || !strings.HasPrefix(err.Error(), "the thing: gave up after ") {
		t.Errorf("Wait = %v, want it to give up when ctx ends", err)
	}
}

func TestOneLine(t *testing.T) {
	if got := OneLine(errors.New("a\n  b\tc ")); got != "a b c" {
		t.Errorf("OneLine = %q", got)
	}
	if got := OneLine(nil); got != "not yet" {
		t.Errorf("OneLine(nil) = %q", got)
	}
}

func TestWaitEveryTriesAtItsPace(t *testing.T) {
	calls := 0
	err := WaitEvery(context.Background(), "the thing", time.Second, time.Millisecond, nil, func(context.Context) error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("WaitEvery = %v after %d calls, want nil after 3", err, calls)
	}
}

func TestTimes(t *testing.T) {
	var tried []int
	err := Times(context.Background(), 3, time.Millisecond, func(_ context.Context, attempt int) error {
		tried = append(tried, attempt)
		return fmt.Errorf("attempt %d failed", attempt)
	})
	if fmt.Sprint(tried) != "[1 2 3]" {
		t.Errorf("tried %v, want [1 2 3]", tried)
	}
	if want := "attempt 1 failed\nattempt 2 failed\nattempt 3 failed"; err == nil || err.Error() != want {
		t.Errorf("Times = %q, want %q", err, want)
	}

	tried = nil
	err = Times(context.Background(), 3, time.Millisecond, func(_ context.Context, attempt int) error {
		tried = append(tried, attempt)
		if attempt == 2 {
			return nil
		}
		return errors.New("no")
	})
	if err != nil || len(tried) != 2 {
		t.Errorf("Times = %v after %v, want nil after the second attempt", err, tried)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = Times(ctx, 3, time.Hour, func(context.Context, int) error { return errors.New("no") })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Times with an ended ctx = %v, want it to end with ctx", err)
	}
}

// A bound of 0 is one try, whose context is still live; it fails with the
// check's own error, and a final error stays final.
func TestWaitWithNoBoundTriesOnce(t *testing.T) {
	calls := 0
	err := Wait(context.Background(), "a live context", 0, nil, func(ctx context.Context) error {
		calls++
		return ctx.Err()
	})
	if err != nil || calls != 1 {
		t.Fatalf("got %v after %d calls, want one successful try", err, calls)
	}
	calls = 0
	err = Wait(context.Background(), "a refusal", 0, nil, func(context.Context) error {
		calls++
		return errors.New("refused")
	})
	if calls != 1 || err == nil || !strings.Contains(err.Error(), "a refusal: gave up after 0s: refused") {
		t.Fatalf("got %v after %d calls", err, calls)
	}
	if err := Wait(context.Background(), "x", 0, nil, func(context.Context) error { return Final(errors.New("no")) }); !errors.Is(err, ErrFinal) {
		t.Fatalf("a final error: got %v", err)
	}
}
