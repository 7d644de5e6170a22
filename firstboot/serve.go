package firstboot

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kiln-project/kiln/contract/netboot"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/retry"
)

// serveArgs are what kiln serve puts on the kernel command line for the
// agent: its plain-HTTP base URL and the pin of its HTTPS listener's CA.
type serveArgs struct {
	URL string // kiln.serve.url=, "" when absent
	Pin string // kiln.serve.ca=, "" when absent
}

// parseServeArgs reads kiln.serve.url= and kiln.serve.ca= from a kernel
// command line. A malformed argument is an error and left out of the
// result; the other one is still returned.
func parseServeArgs(cmdline string) (serveArgs, error) {
	var args serveArgs
	var errs []error
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, netboot.ServeURLArg+"="); ok {
			u, err := url.Parse(v)
			if err != nil || u.Scheme != "http" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
				errs = append(errs, fmt.Errorf("%s=%s is not a plain-HTTP base URL (http://<host>:<port>)", netboot.ServeURLArg, v))
				continue
			}
			args.URL = "http://" + u.Host
		}
		if v, ok := strings.CutPrefix(f, netboot.ServeCAArg+"="); ok {
			if !validPin(v) {
				errs = append(errs, fmt.Errorf("%s=%s is not a CA pin (sha256-<64 hex digits>, as kiln serve prints it)", netboot.ServeCAArg, v))
				continue
			}
			args.Pin = strings.ToLower(v)
		}
	}
	return args, errors.Join(errs...)
}

// validPin reports whether p is sha256-<64 hex digits>.
func validPin(p string) bool {
	h, ok := strings.CutPrefix(p, "sha256-")
	if !ok || len(h) != 64 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

// readServeArgs reads the serve arguments from /proc/cmdline under root.
func readServeArgs(root string) (serveArgs, error) {
	cmdline, _ := os.ReadFile(filepath.Join(root, "/proc/cmdline"))
	return parseServeArgs(string(cmdline))
}

// caBound is how long the agent tries to fetch kiln serve's CA.
const caBound = time.Minute

// PinMismatchError is a CA whose digest is not the pin.
type PinMismatchError struct{ URL, Got, Want string }

func (e *PinMismatchError) Error() string {
	return fmt.Sprintf("the CA certificate from %s is %s, but %s=%s: not trusting it", e.URL, e.Got, netboot.ServeCAArg, e.Want)
}

// fetchPinnedCA fetches <base>/ca.crt over client, trying again for up to
// bound (saying what it waits for through log), and returns the
// certificate when the sha256 of its DER is pin. A certificate that does
// not match is refused at once.
func fetchPinnedCA(ctx context.Context, client *http.Client, base, pin string, bound time.Duration, log retry.Logf) (*x509.Certificate, error) {
	u := base + netboot.CAPath
	var ca *x509.Certificate
	err := retry.Wait(ctx, "kiln serve's CA certificate from "+u, bound, log, func(ctx context.Context) error {
		data, err := httpGet(ctx, client, u, 64<<10)
		if err != nil {
			return err
		}
		block, _ := pem.Decode(data)
		if block == nil || block.Type != "CERTIFICATE" {
			return retry.Final(fmt.Errorf("%s is not a PEM certificate", u))
		}
		if got := netboot.CAPin(block.Bytes); got != pin {
			return retry.Final(&PinMismatchError{URL: u, Got: got, Want: pin})
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return retry.Final(fmt.Errorf("%s: %w", u, err))
		}
		if !c.IsCA {
			return retry.Final(fmt.Errorf("%s matches the pin but is not a CA certificate", u))
		}
		ca = c
		return nil
	})
	return ca, err
}

func httpGet(ctx context.Context, client *http.Client, u string, max int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, retry.Final(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err == nil && int64(len(data)) > max {
		err = retry.Final(fmt.Errorf("GET %s: larger than %d bytes", u, max))
	}
	return data, err
}

// trustPool is the pool https fetches verify servers against: the
// system roots, the image's CA bundles (images, nil when none) and ca.
func trustPool(images *x509.CertPool, ca *x509.Certificate) *x509.CertPool {
	pool := images
	if pool == nil {
		var err error
		if pool, err = x509.SystemCertPool(); err != nil {
			pool = x509.NewCertPool()
		}
	} else {
		pool = pool.Clone()
	}
	pool.AddCert(ca)
	return pool
}

// reportTimeout bounds one phase report.
const reportTimeout = 3 * time.Second

// reporter posts the node's phases to kiln serve's /report/<name>, best
// effort: each report in its own goroutine, bounded by its timeout, and
// at most one console line about reports that fail.
type reporter struct {
	base    string // kiln serve's plain-HTTP base URL
	client  *http.Client
	log     func(format string, args ...any)
	timeout time.Duration

	name   atomic.Pointer[string]
	failed atomic.Bool
	wg     sync.WaitGroup
}

// newReporter reports to base (nil when base is empty: no reports).
func newReporter(base string, log func(string, ...any)) *reporter {
	if base == "" {
		return nil
	}
	return &reporter{base: base, client: &http.Client{}, log: log, timeout: reportTimeout}
}

// setName names the node the reports are about; until then they are
// dropped.
func (r *reporter) setName(name string) {
	if r != nil && name != "" {
		r.name.Store(&name)
	}
}

// report sends phase in the background and returns at once.
func (r *reporter) report(phase string) {
	if r == nil {
		return
	}
	name := r.name.Load()
	if name == nil {
		return
	}
	if len(phase) > 200 { // what kiln serve takes
		phase = phase[:197] + "..."
	}
	body, _ := json.Marshal(struct {
		Phase string `json:"phase"`
		At    string `json:"at"`
	}{phase, time.Now().UTC().Format(time.RFC3339)})
	u := r.base + netboot.ReportPath + url.PathEscape(*name)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if err := r.post(u, body); err != nil && r.failed.CompareAndSwap(false, true) {
			r.log("reporting to kiln serve: %s (best effort: the boot goes on, later failures are not logged)", oneLine(err.Error()))
		}
	}()
}

func (r *reporter) post(u string, body []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return fmt.Errorf("POST %s: %s %s", u, resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// wait lets the reports in flight finish (each within its timeout)
// before the process exits.
func (r *reporter) wait() {
	if r != nil {
		r.wg.Wait()
	}
}

// readServeArgs reads kiln serve's arguments, saying on the console what
// is wrong with a malformed one (which is then ignored), and starts the
// reports when kiln.serve.url= is set.
func (a *Agent) readServeArgs() {
	args, err := readServeArgs(a.Root)
	if err != nil {
		a.console("kernel command line: %s: ignoring it", oneLine(err.Error()))
	}
	a.serve = args
	a.reports = newReporter(args.URL, a.logf)
}

// trustServeCA fetches kiln serve's CA when the command line pins it and
// adds it to the roots the fetcher trusts. Anything else (no URL to fetch
// it from, a server that does not answer, a CA that is not the pinned
// one) changes nothing: https from kiln serve then fails closed.
func (a *Agent) trustServeCA(ctx context.Context) {
	switch {
	case a.serve.Pin == "":
		return
	case a.serve.URL == "":
		a.console("kernel command line: %s= without %s=: no URL to fetch the pinned CA from; not trusting it", netboot.ServeCAArg, netboot.ServeURLArg)
		return
	}
	client := &http.Client{Timeout: 10 * time.Second}
	ca, err := fetchPinnedCA(ctx, client, a.serve.URL, a.serve.Pin, caBound, a.logf)
	var mismatch *PinMismatchError
	switch {
	case errors.As(err, &mismatch):
		a.console("refusing kiln serve's CA: %v (https from kiln serve will fail)", mismatch)
		return
	case err != nil:
		a.console("no CA from kiln serve: %s: not trusting it (https from kiln serve will fail)", oneLine(err.Error()))
		return
	}
	a.fetcher.TrustRoots(trustPool(a.roots, ca))
	a.step("trusting kiln serve's CA %s (%s) from %s", ca.Subject.CommonName, a.serve.Pin, a.serve.URL+netboot.CAPath)
}

// appliedName is the node's name as the applied config gives it: the
// node file's, else the hostname; "" when neither says.
func appliedName(root string) string {
	if f, err := nodefile.Read(filepath.Join(root, nodefile.Path)); err == nil && f.Name != "" {
		return f.Name
	}
	if data, err := os.ReadFile(filepath.Join(root, "/etc/hostname")); err == nil {
		return strings.TrimSpace(string(data))
	}
	return ""
}
