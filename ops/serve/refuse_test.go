package serve

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/contract/netboot"
	"github.com/kiln-project/kiln/gen/nodeconfig"
	"github.com/kiln-project/kiln/gen/site"
)

// copySite is the generated site's nodes with change applied to a copy,
// bypassing the site's validation (which already refuses some of these).
func copySite(t *testing.T, change func(s *site.Site)) *site.Site {
	s, _, _ := generated(t)
	c := *s
	c.Nodes = nil
	for _, n := range s.Nodes {
		n.MACs = append([]string{}, n.MACs...)
		c.Nodes = append(c.Nodes, n)
	}
	change(&c)
	return &c
}

func TestStartRefusesBadInput(t *testing.T) {
	_, siteDir, _ := generated(t)
	for _, c := range []struct {
		name             string
		change           func(t *testing.T, cfg *Config)
		wantFile, wantIn string // wantFile: suffix of Refusal.File
		wantField        string
	}{
		{"two nodes with one MAC", func(t *testing.T, cfg *Config) {
			cfg.Site = copySite(t, func(s *site.Site) { s.Nodes[4].MACs[1] = "52-54-00-10-00-21" })
		}, "site.yaml", "also node w1's", "nodes[4].macs[1]"},
		{"a node without a MAC", func(t *testing.T, cfg *Config) {
			cfg.Site = copySite(t, func(s *site.Site) { s.Nodes[1].MACs = nil })
		}, "site.yaml", "m2 has no MAC", "nodes[1].macs"},
		{"no manifest", func(t *testing.T, cfg *Config) {
			cfg.Image = t.TempDir()
		}, netboot.ManifestName, "not the output of kiln build", ""},
		{"a build without PXE", func(t *testing.T, cfg *Config) {
			os.WriteFile(filepath.Join(cfg.Image, netboot.ManifestName), []byte(`{"name":"node","artifacts":[]}`), 0o644)
		}, netboot.ManifestName, "no pxe/vmlinuz", "artifacts"},
		{"rootfs changed after the build", func(t *testing.T, cfg *Config) {
			p := filepath.Join(cfg.Image, netboot.PXEDir, netboot.Rootfs)
			data, _ := os.ReadFile(p)
			data[0] ^= 1
			os.WriteFile(p, data, 0o644)
		}, "pxe/" + netboot.Rootfs, "does not match", ""},
		{"initrd truncated", func(t *testing.T, cfg *Config) {
			os.Truncate(filepath.Join(cfg.Image, netboot.PXEDir, netboot.Initrd), 3)
		}, "pxe/" + netboot.Initrd, "3 bytes", ""},
		{"kernel missing", func(t *testing.T, cfg *Config) {
			os.Remove(filepath.Join(cfg.Image, netboot.PXEDir, netboot.Kernel))
		}, "pxe/" + netboot.Kernel, "no such file", ""},
		{"a pinned image that does not match", func(t *testing.T, cfg *Config) {
			dir := makeImage(t, "v2")
			os.WriteFile(filepath.Join(dir, netboot.PXEDir, netboot.Kernel), []byte("kernel v3"), 0o644)
			cfg.Pins = map[string]string{"w1": dir}
		}, "pxe/" + netboot.Kernel, "does not match", ""},
		{"a pin for no node", func(t *testing.T, cfg *Config) {
			cfg.Pins = map[string]string{"w9": makeImage(t, "v2")}
		}, "--pin", "no node \"w9\"", "w9"},
		{"an unreadable config", func(t *testing.T, cfg *Config) {
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, nodeconfig.NodesDir), 0o755)
			for _, n := range []string{"m1", "m2", "m3", "w2"} {
				data, _ := os.ReadFile(filepath.Join(siteDir, nodeconfig.NodesDir, n+".ign"))
				os.WriteFile(filepath.Join(dir, nodeconfig.NodesDir, n+".ign"), data, 0o644)
			}
			cfg.SiteDir = dir
		}, "nodes/w1.ign", "unreadable", ""},
		{"a config that is not Ignition", func(t *testing.T, cfg *Config) {
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, nodeconfig.NodesDir), 0o755)
			for _, n := range []string{"m1", "m2", "m3", "w1", "w2"} {
				os.WriteFile(filepath.Join(dir, nodeconfig.NodesDir, n+".ign"), []byte("{"), 0o644)
			}
			cfg.SiteDir = dir
		}, "nodes/m1.ign", "not a config", ""},
		{"arming a worker", func(t *testing.T, cfg *Config) { cfg.Arm = []string{"w1"} }, "--arm", "nothing to arm", "w1"},
		{"arming no node", func(t *testing.T, cfg *Config) { cfg.Arm = []string{"m9"} }, "--arm", "no node", "m9"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config(t)
			cfg.Log = io.Discard
			c.change(t, &cfg)
			_, err := New(cfg)
			var r *Refusal
			if !errors.As(err, &r) {
				t.Fatalf("New: %v, want a *Refusal", err)
			}
			if !strings.HasSuffix(r.File, c.wantFile) || r.Field != c.wantField || !strings.Contains(r.What, c.wantIn) {
				t.Errorf("refusal %q (file %q, field %q), want file *%s, field %q, with %q", r, r.File, r.Field, c.wantFile, c.wantField, c.wantIn)
			}
		})
	}
}

func TestListenRefusesAPortInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, flag := range []string{"--listen", "--tls-listen"} {
		cfg := config(t)
		cfg.Log = io.Discard
		if flag == "--listen" {
			cfg.Listen = taken.Addr().String()
		} else {
			cfg.TLSListen = taken.Addr().String()
		}
		srv, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = srv.Listen()
		var r *Refusal
		if !errors.As(err, &r) || r.File != flag || r.Field != taken.Addr().String() || !strings.Contains(r.What, "in use") {
			t.Errorf("%s on a port in use: %v, want a refusal naming %s", flag, err, flag)
		}
	}
}

func TestStatusAfterFetchesAndAReport(t *testing.T) {
	cfg := config(t)
	cfg.Arm = []string{"m2"}
	cfg.Pins = map[string]string{"w2": makeImage(t, "v2")}
	r := start(t, cfg)
	r.arp.set("52:54:00:10:00:21")
	get(t, nil, r.base+"/ipxe?mac=52-54-00-10-00-21")
	get(t, nil, r.base+"/image/"+r.nodeImage("w1")+"/vmlinuz")
	get(t, nil, r.base+"/config/w1.ign")
	get(t, nil, r.base+"/config/m1.ign") // refused: not armed
	for _, c := range []struct {
		node, body string
		want       int
	}{
		{"w1", `{"phase": "kubelet started", "at": "2026-12-06T10:00:00Z"}`, 204},
		{"w1", `{"phase": "", "at": "x"}`, 400},
		{"w1", `{"phase": "x", "extra": 1}`, 400},
		{"w1", `{"phase": "` + strings.Repeat("x", 5000) + `"}`, 400},
		{"w9", `{"phase": "x"}`, 404},
	} {
		if code, body := post(t, nil, r.base+"/report/"+c.node, c.body); code != c.want {
			t.Errorf("POST /report/%s %.40s = %d %s, want %d", c.node, c.body, code, body, c.want)
		}
	}
	code, body := get(t, nil, r.base+"/status.json")
	var st Status
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("GET /status.json = %d %v\n%s", code, err, body)
	}
	if st.Site != "lab" || !st.TLS || st.CA == "" || len(st.Nodes) != 5 {
		t.Fatalf("status: %+v", st)
	}
	by := map[string]NodeStatus{}
	for _, n := range st.Nodes {
		by[n.Name] = n
	}
	w1 := by["w1"]
	var what []string
	for _, f := range w1.Fetches {
		what = append(what, f.What)
		if f.From != "127.0.0.1" || time.Since(f.At) > time.Minute {
			t.Errorf("w1 fetch %+v: want from 127.0.0.1, now", f)
		}
	}
	if strings.Join(what, " ") != "ipxe vmlinuz w1.ign" {
		t.Errorf("w1 fetches = %v, want ipxe vmlinuz w1.ign", what)
	}
	if w1.Phase == nil || w1.Phase.Phase != "kubelet started" || w1.Phase.At != "2026-12-06T10:00:00Z" || w1.Phase.From != "127.0.0.1" {
		t.Errorf("w1 phase = %+v", w1.Phase)
	}
	if w1.Role != "worker" || strings.Join(w1.MACs, ",") != "52:54:00:10:00:21" || w1.Armed || w1.Secret {
		t.Errorf("w1 = %+v", w1)
	}
	if m1 := by["m1"]; m1.Armed || len(m1.Fetches) != 1 || !strings.Contains(m1.Fetches[0].Refused, "not armed") {
		t.Errorf("m1 = %+v, want not armed, one refused fetch", m1)
	}
	if m2 := by["m2"]; !m2.Armed || m2.ArmedAt == nil || !m2.Secret {
		t.Errorf("m2 = %+v, want armed", m2)
	}
	if w2 := by["w2"]; w2.Image != cfg.Pins["w2"] || len(w2.MACs) != 2 || w2.UUID != "" {
		t.Errorf("w2 = %+v, want pinned to %s, two MACs, no UUID", w2, cfg.Pins["w2"])
	}
}

func TestStatusPageListsEveryNode(t *testing.T) {
	cfg := config(t)
	cfg.Arm = []string{"m3"}
	cfg.Site = copySite(t, func(s *site.Site) { s.Nodes[3].UUID = "4C4C4544-0042-3510-8051-B4C04F4E3121" })
	r := start(t, cfg)
	post(t, nil, r.base+"/report/w2", `{"phase": "joined", "at": "now"}`)
	resp, err := http.Get(r.base + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{`<meta http-equiv="refresh"`, "site lab", `id="node-m1"`, `id="node-m2"`, `id="node-m3"`, `id="node-w1"`, `id="node-w2"`,
		"52:54:00:10:01:22", "UUID <code>4c4c4544-0042-3510-8051-b4c04f4e3121</code>", `class="armed"`, "joined (now)"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("GET / lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(string(page), "<script") {
		t.Errorf("the page carries a script")
	}
	if code, _ := get(t, nil, r.base+"/nothing"); code != 404 {
		t.Errorf("GET /nothing = %d, want 404", code)
	}
}

func TestImagesServeRanges(t *testing.T) {
	cfg := config(t)
	r := start(t, cfg)
	pin := r.nodeImage("w1")
	want, _ := os.ReadFile(filepath.Join(cfg.Image, netboot.PXEDir, netboot.Rootfs))
	req, _ := http.NewRequest("GET", r.base+"/image/"+pin+"/rootfs.squashfs", nil)
	req.Header.Set("Range", "bytes=100-199")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent || string(got) != string(want[100:200]) {
		t.Errorf("range GET = %d, %d bytes", resp.StatusCode, len(got))
	}
	for _, path := range []string{"/image/" + pin + "/boot.ipxe", "/image/" + pin + "/../node.manifest.json", "/image/000000000000/vmlinuz"} {
		if code, _ := get(t, nil, r.base+path); code != 404 {
			t.Errorf("GET %s = %d, want 404", path, code)
		}
	}
	if code, body := get(t, nil, r.base+"/image/"+pin+"/initrd.img"); code != 200 || body != "initrd v1" {
		t.Errorf("GET initrd.img = %d %q", code, body)
	}
}
