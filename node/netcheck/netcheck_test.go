package netcheck

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
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
	if err != nil || body != "ok" || !strings.Contains(progress.String(), "503 Service Unavailable, want 200 (retrying)") {
		t.Fatalf("got %q, %v; progress %q", body, err, progress.String())
	}
}

func TestGetGivesUpAfterItsBound(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	start := time.Now()
	_, err := Get(context.Background(), srv.URL, 3*time.Second, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "GET "+srv.URL+": gave up after 3s: status 404") || time.Since(start) > 8*time.Second {
		t.Fatalf("got %v after %s", err, time.Since(start))
	}
}

func TestGetStatusTakesTheRefusalItWaitsFor(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 2 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		http.Error(w, "refused: already delivered", http.StatusForbidden)
	}))
	defer srv.Close()
	body, err := GetStatus(context.Background(), srv.URL, http.StatusForbidden, 10*time.Second, &bytes.Buffer{})
	if err != nil || body != "refused: already delivered" {
		t.Fatalf("got %q, %v", body, err)
	}
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("here it is")) }))
	defer ok.Close()
	if body, err := GetStatus(context.Background(), ok.URL, http.StatusForbidden, 0, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "status 200 OK, want 403") {
		t.Fatalf("a 200 where 403 is wanted: got %q, %v", body, err)
	}
}

func TestGetWithNoBoundTriesOnce(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("once\n")) }))
	defer srv.Close()
	if body, err := Get(context.Background(), srv.URL, 0, &bytes.Buffer{}); err != nil || body != "once" {
		t.Fatalf("got %q, %v", body, err)
	}
}

func TestResolve(t *testing.T) {
	addrs, err := Resolve(context.Background(), "localhost", Answer{}, time.Second, &bytes.Buffer{})
	if err != nil || len(addrs) == 0 {
		t.Fatalf("localhost: %v %v", addrs, err)
	}
}

func TestResolveWaitsForTheAnswerWanted(t *testing.T) {
	addrs, err := Resolve(context.Background(), "localhost", Answer{}, time.Second, &bytes.Buffer{})
	if err != nil || len(addrs) == 0 {
		t.Fatalf("localhost: %v %v", addrs, err)
	}
	some := addrs[0]
	for _, tc := range []struct {
		name    string
		want    Answer
		wantErr string
	}{
		{"included", Answer{Include: []string{some}}, ""},
		{"excluded absent", Answer{Exclude: []string{"192.0.2.1"}}, ""},
		{"missing", Answer{Include: []string{some, "192.0.2.1"}}, "lacks [192.0.2.1]"},
		{"still listed", Answer{Exclude: []string{some}}, "still lists [" + some + "]"},
		{"both", Answer{Include: []string{"192.0.2.1"}, Exclude: []string{some}}, "lacks [192.0.2.1], still lists [" + some + "]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var progress bytes.Buffer
			start := time.Now()
			_, err := Resolve(context.Background(), "localhost", tc.want, 3*time.Second, &progress)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "resolving localhost: gave up after 3s: answered") || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want %q", err, tc.wantErr)
			}
			if time.Since(start) < 3*time.Second || !strings.Contains(progress.String(), "(retrying)") {
				t.Errorf("gave up after %s without retrying (progress %q)", time.Since(start), progress.String())
			}
		})
	}
}

// udpDNS is a DNS server on a loopback UDP port that answers every A
// question with addr, and counts the questions.
func udpDNS(t *testing.T, addr [4]byte) (string, *atomic.Int32) {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var asked atomic.Int32
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			asked.Add(1)
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
			b.StartQuestions()
			b.Question(q)
			b.StartAnswers()
			if q.Type == dnsmessage.TypeA {
				b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}, dnsmessage.AResource{A: addr})
			}
			if msg, err := b.Finish(); err == nil {
				conn.WriteTo(msg, from)
			}
		}
	}()
	return conn.LocalAddr().String(), &asked
}

// ResolveUDP asks the server it is given, over UDP, and gives up within
// its bound when nothing answers there.
func TestResolveUDP(t *testing.T) {
	server, asked := udpDNS(t, [4]byte{192, 0, 2, 7})
	addrs, err := ResolveUDP(context.Background(), "kiln-check.example", server, Answer{Include: []string{"192.0.2.7"}}, time.Second, &bytes.Buffer{})
	if err != nil || !slices.Equal(addrs, []string{"192.0.2.7"}) || asked.Load() == 0 {
		t.Fatalf("ResolveUDP = %v, %v (%d questions); want [192.0.2.7] from the server", addrs, err, asked.Load())
	}
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	_, err = ResolveUDP(context.Background(), "kiln-check.example", silent.LocalAddr().String(), Answer{}, 2*time.Second, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "at "+silent.LocalAddr().String()+" over UDP: gave up after 2s") {
		t.Fatalf("ResolveUDP of a server that does not answer = %v", err)
	}
}
