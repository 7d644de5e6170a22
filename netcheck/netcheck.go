// Package netcheck is what the kiln image runs inside pods to prove the
// pod network: resolving a name with the pod's resolver, an echo server
// that answers with the address it sees the caller at (so a test can
// tell whether traffic between nodes kept its pod source address), and
// an HTTP GET that retries within a bound.
package netcheck

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// EchoPrefix starts every echo answer.
const EchoPrefix = "kiln-echo"

// Resolve looks name up with the system resolver, retrying until bound
// passes, and reports each failure to progress.
func Resolve(ctx context.Context, name string, bound time.Duration, progress io.Writer) ([]string, error) {
	var addrs []string
	err := retry(ctx, bound, progress, "resolving "+name, func(ctx context.Context) (err error) {
		addrs, err = net.DefaultResolver.LookupHost(ctx, name)
		return err
	})
	return addrs, err
}

// Get fetches url, retrying until bound passes, and returns the body.
func Get(ctx context.Context, url string, bound time.Duration, progress io.Writer) (string, error) {
	var body string
	err := retry(ctx, bound, progress, "GET "+url, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %s", resp.Status)
		}
		body = strings.TrimSpace(string(data))
		return nil
	})
	return body, err
}

// retry calls try (each call bounded to 5 s) every 2 s until it
// succeeds or bound passes; the error names what was tried.
func retry(ctx context.Context, bound time.Duration, progress io.Writer, what string, try func(context.Context) error) error {
	deadline := time.Now().Add(bound)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := try(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %w", what, err)
		}
		fmt.Fprintf(progress, "%s: %v (retrying)\n", what, err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

// EchoHandler answers every request with one line: EchoPrefix, this
// host's name, and the caller's address as the server sees it.
func EchoHandler() http.Handler {
	host, _ := os.Hostname()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		remote, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprintf(w, "%s host=%s from=%s\n", EchoPrefix, host, remote)
	})
}

// Serve runs the echo server on addr until ctx ends.
func Serve(ctx context.Context, addr string) error {
	srv := &http.Server{Addr: addr, Handler: EchoHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		return fmt.Errorf("echo server on %s: %w", addr, err)
	}
	return nil
}
