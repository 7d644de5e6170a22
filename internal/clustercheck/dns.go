// Package clustercheck holds the checks that tell whether a cluster works,
// as seen from inside it.
package clustercheck

import (
	"context"
	"fmt"
	"time"
)

// Resolver looks a name up; *net.Resolver is one.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// DNS resolves a name through a resolver until it answers or Retry has
// passed, as a validation pod does while the cluster's DNS comes up.
type DNS struct {
	Resolver Resolver
	Retry    time.Duration // keep trying this long; 0: one attempt
	Attempt  time.Duration // bound on one lookup
	Interval time.Duration // pause between attempts
	// Log is told each failed attempt that will be retried.
	Log func(format string, args ...any)
}

// Resolve returns the addresses of name, or the last lookup's error.
func (d DNS) Resolve(ctx context.Context, name string) ([]string, error) {
	deadline := time.Now().Add(d.Retry)
	for {
		actx, cancel := context.WithTimeout(ctx, d.Attempt)
		addrs, err := d.Resolver.LookupHost(actx, name)
		cancel()
		if err == nil {
			return addrs, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("resolving %s: %w", name, err)
		}
		if d.Log != nil {
			d.Log("resolving %s: %v (retrying)", name, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("resolving %s: %w (last error: %w)", name, ctx.Err(), err)
		case <-time.After(d.Interval):
		}
	}
}
