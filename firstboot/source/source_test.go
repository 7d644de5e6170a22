package source

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kiln-project/kiln/internal/ignition"
)

func write(t *testing.T, root, p, data string) {
	t.Helper()
	full := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

type noSys struct{}

func (noSys) Run(context.Context, string, ...string) ([]byte, error) { return nil, nil }

func TestSourcesOrderFirstHitWins(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("from-url " + r.URL.Path))
	}))
	defer srv.Close()
	tests := []struct {
		name         string
		files        map[string]string
		stateMounted bool
		cmdline      string
		wantSource   string
		wantData     string
	}{
		{"state beats everything", map[string]string{StateConfigPath: "state", EmbeddedConfigPath: "emb", fwCfgPath: "fw"}, true, "", State, "state"},
		{"state ignored when the partition is not mounted", map[string]string{StateConfigPath: "state", fwCfgPath: "fw"}, false, "", FwCfg, "fw"},
		{"embedded before fw_cfg", map[string]string{EmbeddedConfigPath: "emb", fwCfgPath: "fw"}, true, "", Embedded, "emb"},
		{"fw_cfg before url", map[string]string{fwCfgPath: "fw"}, true, "ignition.config.url=" + srv.URL + "/x", FwCfg, "fw"},
		{"url with substitution", map[string]string{"/sys/class/net/eth0/address": "52:54:00:12:34:56\n", "/sys/class/dmi/id/product_uuid": "ABC-1\n"}, false,
			"quiet ignition.config.url=" + srv.URL + "/${mac}/${uuid}.ign " + HashArg + "=" + ignition.Hash([]byte("from-url /52:54:00:12:34:56/abc-1.ign")),
			URL, "from-url /52:54:00:12:34:56/abc-1.ign"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for p, d := range tc.files {
				write(t, root, p, d)
			}
			env := Env{Root: root, StateMounted: tc.stateMounted, Cmdline: tc.cmdline, Sys: noSys{}, Fetcher: NewFetcher(nil)}
			name, data, err := First(context.Background(), Standard(env))
			if err != nil {
				t.Fatal(err)
			}
			if name != tc.wantSource || string(data) != tc.wantData {
				t.Fatalf("got %s %q, want %s %q", name, data, tc.wantSource, tc.wantData)
			}
		})
	}
}

func TestNoConfigIsAbsentNotAnError(t *testing.T) {
	env := Env{Root: t.TempDir(), Sys: noSys{}, Fetcher: NewFetcher(nil)}
	if _, _, err := First(context.Background(), Standard(env)); !errors.Is(err, ErrAbsent) {
		t.Fatalf("err = %v, want ErrAbsent", err)
	}
}

func TestBrokenSourceStopsTheSearch(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	root := t.TempDir()
	f := &Fetcher{Client: srv.Client(), Timeout: 300 * time.Millisecond, Retry: 50 * time.Millisecond}
	env := Env{Root: root, Cmdline: "ignition.config.url=" + srv.URL + "/missing", Sys: noSys{}, Fetcher: f, AllowUnverified: true}
	name, _, err := First(context.Background(), Standard(env))
	if name != URL || err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("got %s, %v; want the url source to fail with its 404", name, err)
	}
}

// TestTFTPGet runs a minimal TFTP server on loopback and reads a file
// longer than one block through the real client.
func TestTFTPGet(t *testing.T) {
	content := strings.Repeat("kiln-tftp ", 120) // 1200 bytes: three blocks
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go serveOneTFTP(pc, "cfg.ign", []byte(content))
	data, err := NewFetcher(nil).Fetch(context.Background(), "tftp://"+pc.LocalAddr().String()+"/cfg.ign")
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != content {
		t.Fatalf("got %d bytes, want %d", len(data), len(content))
	}
}

func serveOneTFTP(pc *net.UDPConn, name string, content []byte) {
	buf := make([]byte, 1024)
	n, client, err := pc.ReadFromUDP(buf)
	if err != nil || n < 4 || !strings.HasPrefix(string(buf[2:n]), name+"\x00") {
		return
	}
	for block := 1; ; block++ {
		start := (block - 1) * tftpBlock
		end := min(start+tftpBlock, len(content))
		pkt := binary.BigEndian.AppendUint16([]byte{0, tftpDATA}, uint16(block))
		pc.WriteToUDP(append(pkt, content[start:end]...), client)
		pc.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, _, err := pc.ReadFromUDP(buf); err != nil || end-start < tftpBlock {
			return
		}
	}
}

// A config or file fetched over https must not be handed over to plain
// http by a redirect, and a redirect loop ends: both at once, not after
// the retries meant for a network that is still coming up.
func TestFetchRedirects(t *testing.T) {
	var plainHits, tlsHits atomic.Int32
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plainHits.Add(1)
		w.Write([]byte("plain " + r.URL.Path))
	}))
	defer plain.Close()
	var tlsSrv *httptest.Server
	tlsSrv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tlsHits.Add(1)
		switch r.URL.Path {
		case "/to-http":
			http.Redirect(w, r, plain.URL+"/cfg.ign", http.StatusFound)
		case "/to-https":
			http.Redirect(w, r, tlsSrv.URL+"/cfg.ign", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		default:
			w.Write([]byte("tls " + r.URL.Path))
		}
	}))
	defer tlsSrv.Close()
	tests := []struct {
		name               string
		url                string
		want               string   // the body; "" when the fetch must fail
		wantErr            []string // what the error names
		wantTLS, wantPlain int32
	}{
		{"https to https is followed", tlsSrv.URL + "/to-https", "tls /cfg.ign", nil, 2, 0},
		{"https to http is refused", tlsSrv.URL + "/to-http", "", []string{tlsSrv.URL + "/to-http", plain.URL + "/cfg.ign", "leaves https"}, 1, 0},
		{"a redirect loop ends", tlsSrv.URL + "/loop", "", []string{"stopped after 10 redirects"}, 10, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plainHits.Store(0)
			tlsHits.Store(0)
			f := &Fetcher{Client: tlsSrv.Client(), Timeout: 2 * time.Second, Retry: 50 * time.Millisecond}
			data, err := f.Fetch(context.Background(), tc.url)
			if tc.want != "" {
				if err != nil || string(data) != tc.want {
					t.Fatalf("Fetch = %q, %v; want %q", data, err, tc.want)
				}
			} else if err == nil {
				t.Fatalf("Fetch = %q, want an error", data)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if tlsHits.Load() != tc.wantTLS || plainHits.Load() != tc.wantPlain {
				t.Errorf("requests: https %d, http %d; want %d, %d", tlsHits.Load(), plainHits.Load(), tc.wantTLS, tc.wantPlain)
			}
		})
	}
}

// A body over the bound is an error, not a file cut short.
func TestFetchRefusesMoreThanMaxBytes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.TrimPrefix(r.URL.Path, "/")))
	}))
	defer srv.Close()
	tests := []struct {
		name, body string
		wantErr    bool
	}{
		{"at the bound", "0123456789", false},
		{"over the bound", "0123456789x", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &Fetcher{Client: srv.Client(), Timeout: 2 * time.Second, Retry: 50 * time.Millisecond, MaxBytes: 10}
			data, err := f.Fetch(context.Background(), srv.URL+"/"+tc.body)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "larger than 10 bytes") {
					t.Fatalf("Fetch = %q, %v; want a refusal naming the bound", data, err)
				}
				return
			}
			if err != nil || string(data) != tc.body {
				t.Fatalf("Fetch = %q, %v", data, err)
			}
		})
	}
}

func TestTFTPRefusesMoreThanMaxBytes(t *testing.T) {
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go serveOneTFTP(pc, "cfg.ign", []byte(strings.Repeat("x", 1200)))
	f := &Fetcher{Timeout: 2 * time.Second, Retry: 50 * time.Millisecond, MaxBytes: 600}
	if data, err := f.Fetch(context.Background(), "tftp://"+pc.LocalAddr().String()+"/cfg.ign"); err == nil || !strings.Contains(err.Error(), "larger than 600 bytes") {
		t.Fatalf("Fetch = %d bytes, %v; want a refusal naming the bound", len(data), err)
	}
}
