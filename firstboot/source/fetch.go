package source

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/kiln-project/kiln/internal/retry"
)

// Fetcher gets remote configs and file contents over http, https and
// tftp, retrying while the network comes up, within a bound.
type Fetcher struct {
	Client  *http.Client
	Timeout time.Duration // total time allowed for one URL, retries included
	Retry   time.Duration
	// MaxBytes bounds what one URL may return; 0 means DefaultMaxBytes.
	MaxBytes int64
	Log      func(format string, args ...any)
}

// DefaultMaxBytes is the most one URL may return.
const DefaultMaxBytes = 64 << 20

// maxRedirects is how many redirects one GET may follow.
const maxRedirects = 10

// NewFetcher returns a Fetcher with the agent's defaults.
func NewFetcher(log func(string, ...any)) *Fetcher {
	return &Fetcher{Client: &http.Client{Timeout: 30 * time.Second}, Timeout: 3 * time.Minute, Retry: 2 * time.Second, Log: log}
}

// bound says, for a console line, how long ignition.config.url= is
// retried.
func (f *Fetcher) bound() string {
	if f == nil || f.Timeout <= 0 {
		return ""
	}
	return fmt.Sprintf(" (a URL is retried for up to %s)", f.Timeout)
}

// permanentError is a failure that retrying cannot fix.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

// Fetch reads rawURL, retrying failures until the Fetcher's timeout.
func (f *Fetcher) Fetch(ctx context.Context, rawURL string) ([]byte, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("ignition.config.url= is not a URL: %w", redactParseError(err))
	}
	// Every line about the fetch names the URL without its password: the
	// console is read by whoever stands at the machine or its BMC.
	shown := u.Redacted()
	get := f.http
	switch u.Scheme {
	case "http", "https":
	case "tftp":
		get = f.tftp
	default:
		return nil, fmt.Errorf("%s: scheme %q is not supported (http, https, tftp)", shown, u.Scheme)
	}
	var data []byte
	var last error // the last failure that says why, not that time ran out
	var permanent error
	attempt := 0
	err = retry.WaitEvery(ctx, "fetching "+shown, f.Timeout, f.Retry, nil, func(ctx context.Context) error {
		attempt++
		got, err := get(ctx, u)
		if err == nil {
			data = got
			return nil
		}
		if last == nil || ctx.Err() == nil {
			last = err
		}
		if errors.As(err, new(permanentError)) {
			permanent = err
			return retry.Final(err)
		}
		if f.Log != nil && (attempt == 1 || attempt%15 == 0) {
			f.Log("fetching %s (attempt %d): %v; retrying", shown, attempt, err)
		}
		return err
	})
	switch {
	case err == nil:
		return data, nil
	case errors.Is(err, retry.ErrFinal):
		return nil, fmt.Errorf("fetching %s: %w", shown, permanent)
	}
	return nil, fmt.Errorf("fetching %s: gave up after %d attempts: %w", shown, attempt, last)
}

func (f *Fetcher) http(ctx context.Context, u *url.URL) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	client := *f.Client
	client.CheckRedirect = checkRedirect
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u.Redacted(), resp.Status)
	}
	return f.readAll(resp.Body)
}

// checkRedirect follows a bounded number of redirects and none from
// https to http: a config fetched over TLS must not come from a server
// anyone on the path could impersonate.
func checkRedirect(req *http.Request, via []*http.Request) error {
	from := via[len(via)-1].URL
	if from.Scheme == "https" && req.URL.Scheme != "https" {
		return permanentError{fmt.Errorf("refusing the redirect from %s to %s: it leaves https", from.Redacted(), req.URL.Redacted())}
	}
	if len(via) >= maxRedirects {
		return permanentError{fmt.Errorf("stopped after %d redirects, at %s (started at %s)", len(via), req.URL.Redacted(), via[0].URL.Redacted())}
	}
	return nil
}

func (f *Fetcher) tftp(ctx context.Context, u *url.URL) ([]byte, error) {
	return tftpGet(ctx, u, f.maxBytes())
}

// readAll reads r whole, or fails: a body cut short at the bound would be
// written as if it were the file.
func (f *Fetcher) readAll(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, f.maxBytes()+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > f.maxBytes() {
		return nil, permanentError{fmt.Errorf("larger than %s", sizeString(f.maxBytes()))}
	}
	return data, nil
}

func (f *Fetcher) maxBytes() int64 {
	if f.MaxBytes > 0 {
		return f.MaxBytes
	}
	return DefaultMaxBytes
}

// sizeString is n in whole MiB when it is a whole number of them.
func sizeString(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// TrustRoots makes https fetches verify servers against pool (the system
// roots plus the image's CA bundles) instead of the system roots alone.
func (f *Fetcher) TrustRoots(pool *x509.CertPool) {
	if pool == nil {
		return
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool}
	client := *f.Client
	client.Transport = t
	f.Client = &client
}

// redactParseError is a URL parse error without the text it could not
// parse, which may hold a password.
func redactParseError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
