package source

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// Fetcher gets remote configs and file contents over http, https and
// tftp, retrying while the network comes up, within a bound.
type Fetcher struct {
	Client  *http.Client
	Timeout time.Duration // total time allowed for one URL, retries included
	Retry   time.Duration
	Log     func(format string, args ...any)
}

// NewFetcher returns a Fetcher with the agent's defaults.
func NewFetcher(log func(string, ...any)) *Fetcher {
	return &Fetcher{Client: &http.Client{Timeout: 30 * time.Second}, Timeout: 3 * time.Minute, Retry: 2 * time.Second, Log: log}
}

// Fetch reads rawURL, retrying failures until the Fetcher's timeout.
func (f *Fetcher) Fetch(ctx context.Context, rawURL string) ([]byte, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%q is not a URL: %w", rawURL, err)
	}
	get := f.http
	switch u.Scheme {
	case "http", "https":
	case "tftp":
		get = tftpGet
	default:
		return nil, fmt.Errorf("%s: scheme %q is not supported (http, https, tftp)", rawURL, u.Scheme)
	}
	ctx, cancel := context.WithTimeout(ctx, f.Timeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		data, err := get(ctx, u)
		if err == nil {
			return data, nil
		}
		if f.Log != nil && (attempt == 1 || attempt%15 == 0) {
			f.Log("fetching %s (attempt %d): %v; retrying", rawURL, attempt, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("fetching %s: gave up after %d attempts: %w", rawURL, attempt, err)
		case <-time.After(f.Retry):
		}
	}
}

func (f *Fetcher) http(ctx context.Context, u *url.URL) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := f.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 64<<20))
}
