package catalog

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// ContainerdSocket is where containerd serves its API on a node.
const ContainerdSocket = "/run/containerd/containerd.sock"

// AfterContainerd is r whose runs wait, the first time up to bound,
// until containerd accepts connections on socket. kiln-images.service
// starts beside containerd rather than after it, so that its own start
// (seconds on a slow machine) overlaps containerd's.
func AfterContainerd(r Runner, socket string, bound time.Duration) Runner {
	return &afterSocket{Runner: r, socket: socket, bound: bound}
}

type afterSocket struct {
	Runner
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
// trying every 100 ms for up to bound.
func waitSocket(ctx context.Context, path string, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			return c.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for containerd: nothing accepted connections on %s within %s (journalctl -u containerd says why): %w", path, bound, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
