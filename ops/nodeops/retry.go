package nodeops

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// DefaultRetryBound bounds how long a removal step is tried again while
// it fails on what passes by itself (transient).
const DefaultRetryBound = 2 * time.Minute

// runStep runs a step, and again while it fails on something that
// passes by itself, within the retry bound. Removing the etcd member
// that leads makes the others elect a new leader, and until they have,
// the apiserver's writes time out ("etcdserver: request timed out,
// possibly due to previous leader failure"): the very next step must not
// fail on it. Every step finds out what is left to do first, so running
// one again is safe.
func (r *Remover) runStep(ctx context.Context, run func(context.Context, *node, Logf) error, n *node, log Logf) error {
	return r.retry(ctx, log, func() error { return run(ctx, n, log) })
}

// retry runs f, and again while it fails on something transient, within
// the retry bound, saying so every retry.Report.
func (r *Remover) retry(ctx context.Context, log Logf, f func() error) error {
	bound := r.RetryBound
	if bound == 0 {
		bound = DefaultRetryBound
	}
	var last error
	var said time.Time
	_ = retry.WaitEvery(ctx, "a removal step", bound, r.pollInterval(), nil, func(context.Context) error {
		last = f()
		switch {
		case last == nil:
			return nil
		case ctx.Err() != nil || !transient(last):
			return retry.Final(last)
		}
		if now := r.now(); now.Sub(said) >= retry.Report {
			said = now
			log("%s: trying again for up to %s (a slow etcd member, etcd electing a leader, or an apiserver restarting, passes)", retry.OneLine(last), bound)
		}
		return last
	})
	return last // f's own error (the wait's only restates it): the caller names the step
}

// transient reports whether err is one that passes by itself: the
// apiserver's 5xx answers and timeouts (etcd without a leader for a
// moment comes back as one), a connection refused, reset or timed out,
// etcd's own answers while it elects a leader, and a quorum refusal that
// rests on members that did not answer in time (a starved machine's etcd
// can miss one status call). A refusal for what an answer cannot change (the last
// master), a 4xx answer or a drain held by a disruption budget is not.
func transient(err error) bool {
	var st apierrors.APIStatus
	var refusal *etcdmember.Refusal
	switch {
	case err == nil:
		return false
	case errors.As(err, &refusal):
		return refusal.Unanswered
	case errors.As(err, &st) && st.Status().Code >= 500: // 504 Timeout and ServerTimeout among them
		return true
	case utilnet.IsConnectionRefused(err), utilnet.IsConnectionReset(err), utilnet.IsProbableEOF(err):
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	if s, ok := status.FromError(err); ok && (s.Code() == codes.Unavailable || s.Code() == codes.DeadlineExceeded) {
		return true
	}
	msg := err.Error()
	for _, etcd := range []string{"etcdserver: request timed out", "etcdserver: leader changed", "etcdserver: no leader", "context deadline exceeded"} {
		if strings.Contains(msg, etcd) {
			return true
		}
	}
	return false
}
