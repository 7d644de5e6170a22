package browser

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestOpenWithoutABrowser(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if b, err := Open(context.Background()); !errors.Is(err, ErrNoBrowser) {
		if b != nil {
			b.Close()
		}
		t.Fatalf("Open with an empty PATH: %v, want ErrNoBrowser", err)
	}
}

// A page that shows the server's state and reloads itself every second,
// as kiln serve's status page does (every 5 s).
func refreshingPage(state *atomic.Value) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!DOCTYPE html><meta http-equiv="refresh" content="1"><title>t</title><p id="state">state: %s</p>`, state.Load())
	})
	return mux
}

func TestLoadTextAndWaitAcrossReloads(t *testing.T) {
	var state atomic.Value
	state.Store("before")
	srv := httptest.NewServer(refreshingPage(&state))
	defer srv.Close()
	b := ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if err := b.Load(ctx, srv.URL+"/"); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Text(ctx, "#state"); err != nil || got != "state: before" {
		t.Fatalf("Text(#state) = %q, %v, want %q", got, err, "state: before")
	}
	state.Store("after")
	if got, err := b.WaitText(ctx, "p#state", "after"); err != nil || got != "state: after" {
		t.Fatalf("WaitText(p#state, after) = %q, %v", got, err)
	}
}

func TestErrorsNameTheURLAndTheSelector(t *testing.T) {
	var state atomic.Value
	state.Store("still")
	srv := httptest.NewServer(refreshingPage(&state))
	defer srv.Close()
	b := ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if err := b.Load(ctx, srv.URL+"/nothing"); err == nil || !strings.Contains(err.Error(), srv.URL+"/nothing") || !strings.Contains(err.Error(), "404") {
		t.Errorf("Load of a missing page: %v, want an error naming the URL and 404", err)
	}
	if err := b.Load(ctx, srv.URL+"/"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ sel, want, says string }{
		{"#absent", "", "no element matches"},
		{"#state", "never", `its text "state: still" does not contain "never"`},
	} {
		short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		var err error
		if c.want == "" {
			_, err = b.Text(short, c.sel)
		} else {
			_, err = b.WaitText(short, c.sel, c.want)
		}
		cancel()
		if err == nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v, want a deadline error", c.sel, err)
			continue
		}
		for _, part := range []string{srv.URL + "/", c.sel, c.says} {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("%s: error %q does not say %q", c.sel, err, part)
			}
		}
	}
}
