// Package browser drives Debian's headless chromium for tests and tools
// through chromedp: it finds the browser, starts it with a throwaway
// profile, loads a page and reads or waits for an element's text, each
// step bounded by its caller's context and failing with the URL and the
// selector it was about.
package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
)

// ErrNoBrowser is Open's error when no chromium is installed.
var ErrNoBrowser = errors.New("no chromium, chromium-browser or google-chrome in PATH")

// names are the browser programs Open looks for, in order: Debian's
// package first.
var names = []string{"chromium", "chromium-browser", "google-chrome"}

// Find returns the path of the browser Open would start.
func Find() (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", ErrNoBrowser
}

// Browser is one headless browser with one tab; its methods drive that
// tab, so one goroutine at a time uses it.
type Browser struct {
	tab        context.Context // chromedp's context of the tab
	closeTab   context.CancelFunc
	closeAlloc context.CancelFunc // stops the process and waits for it
	kill       context.CancelFunc // ends the context the browser lives in
	url        string             // the last one loaded
}

// Open starts a headless browser; ctx bounds the start only, the browser
// runs until Close.
func Open(ctx context.Context) (*Browser, error) {
	path, err := Find()
	if err != nil {
		return nil, err
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless,
		// Chromium's sandbox refuses to run as root, which tests here are.
		chromedp.NoSandbox,
		// No user-data-dir: chromedp gives the browser a temporary one
		// and removes it when the browser exits.
	)
	// The browser lives as long as the context of its first action, so it
	// must not be ctx, which may carry the caller's deadline: life ends
	// with ctx only until the browser is up.
	life, kill := context.WithCancel(context.WithoutCancel(ctx))
	alloc, closeAlloc := chromedp.NewExecAllocator(life, opts...)
	tab, closeTab := chromedp.NewContext(alloc)
	b := &Browser{tab: tab, closeTab: closeTab, closeAlloc: closeAlloc, kill: kill}
	// kill, not closeTab: chromedp's cancel func waits for the browser
	// to stop, and run a second time (by Close) for a browser that never
	// started it waits forever.
	stop := context.AfterFunc(ctx, kill)
	err = chromedp.Do(tab) // starts the browser and opens its tab
	if !stop() {
		err = fmt.Errorf("starting %s: %w", path, context.Cause(ctx))
	} else if err != nil {
		err = fmt.Errorf("starting %s: %w", path, err)
	}
	if err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Close stops the browser and removes its profile.
func (b *Browser) Close() {
	b.closeTab()
	b.closeAlloc()
	b.kill()
}

// bounded is the tab's context, ended when ctx ends too.
func (b *Browser) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(b.tab)
	stop := context.AfterFunc(ctx, cancel)
	return c, func() { stop(); cancel() }
}

// Load opens url in the tab and waits for the page's load event.
func (b *Browser) Load(ctx context.Context, url string) error {
	c, cancel := b.bounded(ctx)
	defer cancel()
	b.url = url
	resp, err := chromedp.Run(c, chromedp.NavigateResponse(url))
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("loading %s: %w", url, context.Cause(ctx))
	case err != nil:
		return fmt.Errorf("loading %s: %w", url, err)
	case resp != nil && resp.Status/100 != 2:
		return fmt.Errorf("loading %s: HTTP %d %s", url, resp.Status, resp.StatusText)
	}
	return nil
}

// Text returns the rendered text (innerText) of the first element that
// matches the CSS selector, waiting until one does.
func (b *Browser) Text(ctx context.Context, selector string) (string, error) {
	return b.poll(ctx, selector, "", func(string) bool { return true })
}

// WaitText waits until the text of the first element that matches the
// CSS selector contains want, and returns that text. It reads the page
// the tab shows at each try, so it follows the page's own reloads.
func (b *Browser) WaitText(ctx context.Context, selector, want string) (string, error) {
	return b.poll(ctx, selector, want, func(text string) bool { return strings.Contains(text, want) })
}

// pollEvery is how often poll reads the page again.
const pollEvery = 100 * time.Millisecond

// seen is one read of the page: its URL and the element's text, nil
// when no element matches.
type seen struct {
	URL  string  `json:"url"`
	Text *string `json:"text"`
}

// poll reads the selector's text until ok accepts it or ctx ends. Each read
// is one evaluation in whatever document the tab holds then, so a reload
// in between (a page that refreshes itself) only makes a read fail.
func (b *Browser) poll(ctx context.Context, selector, want string, ok func(string) bool) (string, error) {
	c, cancel := b.bounded(ctx)
	defer cancel()
	sel, _ := json.Marshal(selector)
	expr := `(() => { const e = document.querySelector(` + string(sel) + `);
		return {url: location.href, text: e ? e.innerText : null}; })()`
	last := seen{URL: b.url}
	var readErr error // the last read's, nil when it worked
	for {
		s, err := chromedp.Run(c, chromedp.Evaluate[seen](expr))
		if err == nil {
			last, readErr = s, nil
			if s.Text != nil && ok(*s.Text) {
				return *s.Text, nil
			}
		} else if ctx.Err() == nil {
			readErr = err
		}
		select {
		case <-ctx.Done():
			var what string
			switch {
			case readErr != nil:
				what = fmt.Sprintf("cannot read the page: %v", readErr)
			case last.Text == nil:
				what = "no element matches"
			default:
				what = fmt.Sprintf("its text %q does not contain %q", *last.Text, want)
			}
			return "", fmt.Errorf("%s: %s: %s: %w", last.URL, selector, what, context.Cause(ctx))
		case <-time.After(pollEvery):
		}
	}
}
