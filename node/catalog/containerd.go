package catalog

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/kiln-project/kiln/internal/command"
	"github.com/kiln-project/kiln/internal/retry"
)

// ContainerdSocket is where containerd serves its API on a node.
const ContainerdSocket = "/run/containerd/containerd.sock"

// AfterContainerd is r whose runs wait, the first time up to bound,
// until containerd accepts connections on socket. kiln-images.service
// starts beside containerd rather than after it, so that its own start
// (seconds on a slow machine) overlaps containerd's.
func AfterContainerd(r command.Runner, socket string, bound time.Duration) command.Runner {
	return &afterSocket{Runner: r, socket: socket, bound: bound}
}

type afterSocket struct {
	command.Runner
	socket string
	bound  time.Duration
	once   sync.Once
	err    error
}

func (a *afterSocket) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	a.once.Do(func() { a.err = waitSocket(ctx, a.socket, a.bound) })
	if a.err != nil {
		return nil, a.err
	}
	return a.Runner.Run(ctx, name, args...)
}

// waitSocket is nil once a connection to the unix socket path succeeds,
// within bound.
func waitSocket(ctx context.Context, path string, bound time.Duration) error {
	if err := WaitContainerd(ctx, path, bound, nil); err != nil {
		return fmt.Errorf("waiting for %w (journalctl -u containerd says why)", err)
	}
	return nil
}

// WaitContainerd waits, at most bound, until containerd answers on
// socket: until a connection to the socket succeeds or, where answers is
// not nil, until answers passes instead (a retry.Final error from it ends
// the wait). It tries every 100 ms; the error names the socket and wraps
// the last failure. The node's image import and the bake's image seed
// both wait for their containerd through it.
func WaitContainerd(ctx context.Context, socket string, bound time.Duration, answers func(context.Context) error) error {
	if answers == nil {
		answers = func(ctx context.Context) error {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", socket)
			if err != nil {
				return err
			}
			return c.Close()
		}
	}
	return retry.WaitEvery(ctx, "containerd on "+socket, bound, 100*time.Millisecond, nil, answers)
}
