package netcheck

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestGetReturnsTheEchoWithTheCallersAddress(t *testing.T) {
	srv := httptest.NewServer(EchoHandler())
	defer srv.Close()
	body, err := Get(context.Background(), srv.URL, time.Second, &bytes.Buffer{})
	if err != nil || !strings.HasPrefix(body, EchoPrefix+" host=") || !strings.HasSuffix(body, " from=127.0.0.1") {
		t.Fatalf("got %q, %v", body, err)
	}
}

func TestGetRetriesUntilTheServerAnswers(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 2 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	}))
	defer srv.Close()
	var progress bytes.Buffer
	body, err := Get(context.Background(), srv.URL, 10*time.Second, &progress)
	if err != nil || body != "ok" || !strings.Contains(progress.String(), "503 Service Unavailable (retrying)") {
		t.Fatalf("got %q, %v; progress %q", body, err, progress.String())
	}
}

func TestGetGivesUpAfterItsBound(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	start := time.Now()
	_, err := Get(context.Background(), srv.URL, 3*time.Second, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "GET "+srv.URL+": status 404") || time.Since(start) > 8*time.Second {
		t.Fatalf("got %v after %s", err, time.Since(start))
	}
}

func TestResolve(t *testing.T) {
	addrs, err := Resolve(context.Background(), "localhost", time.Second, &bytes.Buffer{})
	if err != nil || len(addrs) == 0 {
		t.Fatalf("localhost: %v %v", addrs, err)
	}
}
