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
	"testing"
	"time"
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
			"quiet ignition.config.url=" + srv.URL + "/${mac}/${uuid}.ign", URL, "from-url /52:54:00:12:34:56/abc-1.ign"},
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
	env := Env{Root: root, Cmdline: "ignition.config.url=" + srv.URL + "/missing", Sys: noSys{}, Fetcher: f}
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
