package clustercheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

var errNXDomain = errors.New("no such host")

// flakyResolver fails its first failures lookups, then answers.
type flakyResolver struct {
	failures, calls int
}

func (r *flakyResolver) LookupHost(ctx context.Context, host string) ([]string, error) {
	r.calls++
	if _, ok := ctx.Deadline(); !ok {
		return nil, errors.New("lookup without a bound")
	}
	if r.calls <= r.failures {
		return nil, errNXDomain
	}
	return []string{"10.96.0.1"}, nil
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failures  int
		retry     time.Duration
		wantCalls int
		wantErr   bool
	}{
		{"answers at once", 0, 0, 1, false},
		{"no retry: one attempt fails", 1, 0, 1, true},
		{"answers after two failures within the retry", 2, time.Minute, 3, false},
		{"keeps failing past the retry", 1000, 30 * time.Millisecond, -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &flakyResolver{failures: tc.failures}
			var logged []string
			d := DNS{Resolver: r, Retry: tc.retry, Attempt: time.Second, Interval: time.Millisecond,
				Log: func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }}
			addrs, err := d.Resolve(context.Background(), "kubernetes.default")
			if tc.wantErr {
				if !errors.Is(err, errNXDomain) || !strings.Contains(err.Error(), "resolving kubernetes.default") {
					t.Fatalf("err = %v, want the last lookup error naming the name", err)
				}
			} else if err != nil || !slices.Equal(addrs, []string{"10.96.0.1"}) {
				t.Fatalf("Resolve = %v, %v", addrs, err)
			}
			if tc.wantCalls >= 0 && r.calls != tc.wantCalls {
				t.Errorf("%d lookups, want %d", r.calls, tc.wantCalls)
			}
			if len(logged) != r.calls-1 {
				t.Errorf("%d retry lines for %d lookups: %q", len(logged), r.calls, logged)
			}
		})
	}
}

func TestResolveStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	d := DNS{Resolver: &flakyResolver{failures: 1000}, Retry: time.Hour, Attempt: time.Second, Interval: time.Hour,
		Log: func(string, ...any) { cancel() }}
	_, err := d.Resolve(ctx, "kubernetes.default")
	if !errors.Is(err, context.Canceled) || !errors.Is(err, errNXDomain) {
		t.Fatalf("err = %v, want cancelled with the last lookup error", err)
	}
}
