package firstboot

import (
	"bytes"
	"context"
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

// On a boot whose kernel command line pins the config, the config stored
// on the node's own state partition is applied only when it is the
// pinned one. Otherwise the pinned config replaces it, with its hash
// recorded beside it; when the pinned config cannot be had, the node
// says so and changes nothing, even though it has a stored config.
func TestPinnedBootTakesOnlyThePinnedConfig(t *testing.T) {
	const (
		old    = `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/motd","contents":{"source":"data:,old"}}]}}`
		pinned = `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/motd","contents":{"source":"data:,pinned"}}]}}`
		record = `{"version":1,"macs":["52:54:00:00:00:01"]}`
	)
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/pinned.ign":
			w.Write([]byte(pinned))
		case "/old.ign":
			w.Write([]byte(old))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	oldHash, pin := ignition.Hash([]byte(old)), ignition.Hash([]byte(pinned))
	mismatch := "stored config " + oldHash + " does not match kiln.config.hash " + pin
	tests := []struct {
		name       string
		stored     string
		recorded   string // config.ign.sha512; "" for none (an earlier kiln stored the config)
		args       string
		wait       bool     // the agent waits for a config when there is none
		wantSource string   // "" when the boot fails
		wantLines  []string // what the console says
		wantHash   string   // recorded after the boot
		wantHits   int32
	}{
		{"the pinned config is stored", pinned, pin, "ignition.config.url=" + srv.URL + "/gone kiln.config.hash=" + pin, false,
			"state", []string{"config from state"}, pin, 0},
		{"the pinned config is stored, by an earlier kiln: its hash is recorded", pinned, "", "kiln.config.hash=" + pin, false,
			"state", []string{"stored config's hash recorded (" + pin + ")"}, pin, 0},
		{"another config is stored: the pinned one replaces it", old, oldHash, "ignition.config.url=" + srv.URL + "/pinned.ign kiln.config.hash=" + pin, false,
			"url", []string{"the stored config is not the one kiln.config.hash= pins: taking the config from the other sources (a URL is retried for up to 3m0s)", mismatch + ": using the verified config from url", "config stored on the state partition (" + pin + ")"}, pin, 1},
		{"the pinned source serves another config", old, oldHash, "ignition.config.url=" + srv.URL + "/old.ign kiln.config.hash=" + pin, false,
			"", []string{"error: config source url: verification failed", mismatch + ", so it is not used either; nothing was changed"}, oldHash, 1},
		{"the pinned source fails", old, oldHash, "ignition.config.url=ftp://10.0.2.2/pinned.ign kiln.config.hash=" + pin, false,
			"", []string{`error: config source url: ftp://10.0.2.2/pinned.ign: scheme "ftp" is not supported`, mismatch + ", so it is not used either"}, oldHash, 0},
		{"no source of the pinned config: no wait, no fallback", old, oldHash, "kiln.config.hash=" + pin, true,
			"", []string{"error: " + mismatch + ", and no other source has a config"}, oldHash, 0},
		{"no pin: the stored config wins", old, "", "ignition.config.url=" + srv.URL + "/pinned.ign", false,
			"state", []string{"stored config's hash recorded (" + oldHash + ")"}, oldHash, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hits.Store(0)
			root := nodeRoot(t, "")
			files := map[string]string{
				"/proc/cmdline":                         "console=ttyS0 " + tc.args + "\n",
				"/var/lib/kiln-state/kiln-machine.json": record,
				"/var/lib/kiln/config.ign":              tc.stored,
			}
			if tc.recorded != "" {
				files["/var/lib/kiln/config.ign.sha512"] = tc.recorded + "\n"
			}
			for p, d := range files {
				os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
				os.WriteFile(filepath.Join(root, p), []byte(d), 0o600)
			}
			before := snapshot(t, root)
			sys := &fakeSys{answers: map[string]answer{"blkid -o device -t LABEL=KILN-STATE": {"/dev/vdb1\n", nil}}}
			var out bytes.Buffer
			a := &Agent{Root: root, Console: &out, Sys: sys, Machine: fakeMachine{MACs: []string{"52:54:00:00:00:01"}}}
			if tc.wait {
				a.Wait = 10 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := a.Run(ctx)
			console := out.String()
			got := finalLines(console)
			for _, l := range tc.wantLines {
				if !strings.Contains(console, l) {
					t.Errorf("the console does not say %q:\n%s", l, console)
				}
			}
			if hits.Load() != tc.wantHits {
				t.Errorf("%d requests, want %d", hits.Load(), tc.wantHits)
			}
			stored, _ := os.ReadFile(filepath.Join(root, "/var/lib/kiln/config.ign"))
			recorded, _ := os.ReadFile(filepath.Join(root, "/var/lib/kiln/config.ign.sha512"))
			if string(recorded) != tc.wantHash+"\n" {
				t.Errorf("recorded hash %q, want %s", recorded, tc.wantHash)
			}
			motd, _ := os.ReadFile(filepath.Join(root, "etc/motd"))
			if tc.wantSource == "" {
				if err == nil || len(got) != 1 || !strings.HasPrefix(got[0], "kiln-firstboot: error: ") || !strings.Contains(got[0], mismatch) {
					t.Fatalf("final lines %q, %v; want one error naming both hashes\n%s", got, err, console)
				}
				if string(stored) != tc.stored || motd != nil {
					t.Errorf("a failed pinned boot changed the node: stored config %q, /etc/motd %q", stored, motd)
				}
				after := snapshot(t, root)
				delete(after, statusPath)
				if len(after) != len(before) {
					t.Errorf("files changed: before %v after %v", keys(before), keys(after))
				}
				return
			}
			if err != nil || len(got) != 1 || got[0] != "kiln-firstboot: done source="+tc.wantSource {
				t.Fatalf("final lines %q, %v; want done source=%s\n%s", got, err, tc.wantSource, console)
			}
			if want := map[bool]string{true: pinned, false: tc.stored}[tc.wantSource == "url"]; string(stored) != want {
				t.Errorf("stored config %q, want %q", stored, want)
			}
			if !strings.Contains(string(stored), `"data:,`+string(motd)+`"`) {
				t.Errorf("/etc/motd %q is not the stored config's", motd)
			}
		})
	}
}

// A blank disk is not a state filesystem without a record: on the first
// boot the agent partitions and formats it and takes the new filesystem
// as this machine's without being asked, pinned or not.
func TestFirstBootTakesTheStatePartitionItMakes(t *testing.T) {
	const cfg = `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/motd","contents":{"source":"data:,hello"}}]}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(cfg)) }))
	defer srv.Close()
	tests := []struct {
		name, fwCfg, args, wantSource string
	}{
		{"fw_cfg", cfg, "", "fw_cfg"},
		{"pinned url", "", "ignition.config.url=" + srv.URL + "/node.ign kiln.config.hash=" + ignition.Hash([]byte(cfg)), "url"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := nodeRoot(t, tc.fwCfg)
			os.WriteFile(filepath.Join(root, "/proc/cmdline"), []byte("console=ttyS0 "+tc.args+"\n"), 0o644)
			for _, p := range []string{"/dev/vda", "/dev/vda4", "/dev/disk/by-partlabel/KILN-ROOT-A"} {
				os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
				os.WriteFile(filepath.Join(root, p), nil, 0o644)
			}
			os.Symlink("../../vda4", filepath.Join(root, "/dev/disk/by-partlabel/KILN-STATE"))
			sys := &fakeSys{answers: map[string]answer{
				"lsblk -ndo PKNAME " + filepath.Join(root, "/dev/disk/by-partlabel/KILN-ROOT-A"): {"vda\n", nil},
			}}
			var out bytes.Buffer
			a := &Agent{Root: root, Console: &out, Sys: sys, Machine: fakeMachine{MACs: []string{"52:54:00:00:00:01"}}}
			if err := a.Run(context.Background()); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			console := out.String()
			if got := finalLines(console); len(got) != 1 || got[0] != "kiln-firstboot: done source="+tc.wantSource {
				t.Fatalf("final lines %q\n%s", got, console)
			}
			for _, want := range []string{"state partition created on /dev/vda (/dev/vda4)", "config stored on the state partition (" + ignition.Hash([]byte(cfg)) + ")"} {
				if !strings.Contains(console, "kiln-firstboot: "+want+"\n") {
					t.Errorf("the console does not say %q:\n%s", want, console)
				}
			}
			if strings.Contains(console, "kiln.state.adopt") || a.status.ForeignState != "" {
				t.Errorf("the new partition was taken for a foreign one:\n%s", console)
			}
			if rec, _ := os.ReadFile(filepath.Join(root, "/var/lib/kiln-state/kiln-machine.json")); !strings.Contains(string(rec), "52:54:00:00:00:01") {
				t.Errorf("the new partition's record: %q", rec)
			}
			if h, _ := os.ReadFile(filepath.Join(root, "/var/lib/kiln/config.ign.sha512")); string(h) != ignition.Hash([]byte(cfg))+"\n" {
				t.Errorf("recorded hash %q", h)
			}
		})
	}
}
