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
	"slices"
	"strings"
	"time"

	"github.com/kiln-project/kiln/internal/retry"
)

// EchoPrefix starts every echo answer.
const EchoPrefix = "kiln-echo"

// Answer is what a Resolve waits for: every address of Include in the
// answer and none of Exclude. The zero Answer takes any answer.
type Answer struct {
	Include, Exclude []string
}

// check says what the answer addrs lacks or still holds.
func (a Answer) check(addrs []string) error {
	var missing, extra []string
	for _, want := range a.Include {
		if !slices.Contains(addrs, want) {
			missing = append(missing, want)
		}
	}
	for _, gone := range a.Exclude {
		if slices.Contains(addrs, gone) {
			extra = append(extra, gone)
		}
	}
	switch {
	case len(missing) > 0 && len(extra) > 0:
		return fmt.Errorf("answered %v: lacks %v, still lists %v", addrs, missing, extra)
	case len(missing) > 0:
		return fmt.Errorf("answered %v: lacks %v", addrs, missing)
	case len(extra) > 0:
		return fmt.Errorf("answered %v: still lists %v", addrs, extra)
	}
	return nil
}

// Resolve looks name up with the system resolver until the answer is
// the one want describes or bound passes, and reports each failed try
// to progress. A discovery name follows the apiservers serving, so a
// caller that expects a set waits here, in one process, for it.
func Resolve(ctx context.Context, name string, want Answer, bound time.Duration, progress io.Writer) ([]string, error) {
	return resolveWith(ctx, net.DefaultResolver, "resolving "+name, name, want, bound, progress)
}

// ResolveUDP is Resolve asking the DNS server at server (an IP, port 53,
// or IP:port) itself, over UDP only: a check of UDP between pods (a DNS
// server's pod IP, a ClusterIP) must not pass by falling back to TCP.
func ResolveUDP(ctx context.Context, name, server string, want Answer, bound time.Duration, progress io.Writer) ([]string, error) {
	addr := server
	if _, _, err := net.SplitHostPort(server); err != nil {
		addr = net.JoinHostPort(server, "53")
	}
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
	return resolveWith(ctx, r, "resolving "+name+" at "+addr+" over UDP", name, want, bound, progress)
}

func resolveWith(ctx context.Context, r *net.Resolver, what, name string, want Answer, bound time.Duration, progress io.Writer) ([]string, error) {
	var addrs []string
	err := retryBound(ctx, bound, progress, what, func(ctx context.Context) (err error) {
		if addrs, err = r.LookupHost(ctx, name); err != nil {
			return err
		}
		return want.check(addrs)
	})
	return addrs, err
}

// Get fetches url, retrying until bound passes, and returns the body.
func Get(ctx context.Context, url string, bound time.Duration, progress io.Writer) (string, error) {
	return GetStatus(ctx, url, http.StatusOK, bound, progress)
}

// GetStatus fetches url until it answers with status want (a refusal a
// check expects, such as 403, counts as the answer) or bound passes,
// and returns the body.
func GetStatus(ctx context.Context, url string, want int, bound time.Duration, progress io.Writer) (string, error) {
	var body string
	err := retryBound(ctx, bound, progress, "GET "+url, func(ctx context.Context) error {
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
		if resp.StatusCode != want {
			return fmt.Errorf("status %s, want %d", resp.Status, want)
		}
		body = strings.TrimSpace(string(data))
		return nil
	})
	return body, err
}

// retryBound calls try (each call bounded to 5 s) every retry.Interval
// until it succeeds or bound passes (0: one try), and reports each
// failed try to progress; the error names what was tried.
func retryBound(ctx context.Context, bound time.Duration, progress io.Writer, what string, try func(context.Context) error) error {
	return retry.Wait(ctx, what, bound, nil, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := try(cctx)
		if err != nil {
			fmt.Fprintf(progress, "%s: %v (retrying)\n", what, err)
		}
		return err
	})
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
