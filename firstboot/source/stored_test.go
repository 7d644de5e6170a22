package source

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kiln-project/kiln/internal/ignition"
)

// On a boot that pins the config, the stored copy is used only when it
// hashes to the pin, whatever is recorded beside it; otherwise the other
// sources are tried as on a first boot, and when they give nothing
// usable the stored copy is still not used. Without a pin the stored
// copy wins, as it always has.
func TestPinnedBootUsesTheStoredConfigOnlyWhenItIsThePinnedOne(t *testing.T) {
	const (
		stored = `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/motd","contents":{"source":"data:,stored"}}]}}`
		pinned = `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/motd","contents":{"source":"data:,pinned"}}]}}`
	)
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/pinned.ign":
			w.Write([]byte(pinned))
		case "/stored.ign":
			w.Write([]byte(stored))
		default:
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	pin := ignition.Hash([]byte(pinned))
	storedHash := ignition.Hash([]byte(stored))
	mismatch := "stored config " + storedHash + " does not match " + HashArg + " " + pin
	tests := []struct {
		name         string
		stateMounted bool
		files        map[string]string
		cmdline      string
		wantSource   string
		wantData     string
		wantAside    bool     // the stored config set aside
		wantErr      []string // what the error says; nil when a config is chosen
		wantHits     int32
	}{
		{"no pin: the stored config wins", true, map[string]string{StateConfigPath: stored},
			"ignition.config.url=" + srv.URL + "/pinned.ign", State, stored, false, nil, 0},
		{"the pinned config is stored: nothing is fetched", true, map[string]string{StateConfigPath: pinned},
			"ignition.config.url=" + srv.URL + "/down " + HashArg + "=" + pin, State, pinned, false, nil, 0},
		{"a sha256 pin", true, map[string]string{StateConfigPath: pinned},
			HashArg + "=" + sha256Of(t, pinned), State, pinned, false, nil, 0},
		{"no recorded hash: the stored config itself is checked", true, map[string]string{StateConfigPath: pinned},
			HashArg + "=" + pin, State, pinned, false, nil, 0},
		{"another config stored: the pinned one is fetched", true, map[string]string{StateConfigPath: stored},
			"ignition.config.url=" + srv.URL + "/pinned.ign " + HashArg + "=" + pin, URL, pinned, true, nil, 1},
		{"a forged record is not trusted", true, map[string]string{StateConfigPath: stored, StateHashPath: pin + "\n"},
			"ignition.config.url=" + srv.URL + "/pinned.ign " + HashArg + "=" + pin, URL, pinned, true, nil, 1},
		{"the url serves another config too", true, map[string]string{StateConfigPath: stored},
			"ignition.config.url=" + srv.URL + "/stored.ign " + HashArg + "=" + pin, URL, "", true,
			[]string{"config source url: verification failed", mismatch + ", so it is not used either; nothing was changed"}, 1},
		{"the pinned source is unreachable", true, map[string]string{StateConfigPath: stored},
			"ignition.config.url=" + srv.URL + "/down " + HashArg + "=" + pin, URL, "", true,
			[]string{"gave up after", "503", mismatch + ", so it is not used either"}, -1},
		{"no other source", true, map[string]string{StateConfigPath: stored},
			HashArg + "=" + pin, "", "", true,
			[]string{mismatch + ", and no other source has a config", "nothing was changed"}, 0},
		{"fw_cfg is taken as on a first boot", true, map[string]string{StateConfigPath: stored, fwCfgPath: stored},
			HashArg + "=" + pin, FwCfg, stored, true, nil, 0},
		{"a malformed pin", true, map[string]string{StateConfigPath: stored},
			HashArg + "=sha512-abc", State, "", false, []string{"config source state: kernel argument " + HashArg + "="}, 0},
		{"state not mounted: its copy is not read", false, map[string]string{StateConfigPath: stored},
			"ignition.config.url=" + srv.URL + "/pinned.ign " + HashArg + "=" + pin, URL, pinned, false, nil, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hits.Store(0)
			root := t.TempDir()
			for p, d := range tc.files {
				write(t, root, p, d)
			}
			f := &Fetcher{Client: srv.Client(), Timeout: 300 * time.Millisecond, Retry: 50 * time.Millisecond}
			env := Env{Root: root, StateMounted: tc.stateMounted, Cmdline: "console=ttyS0 " + tc.cmdline, Sys: noSys{}, Fetcher: f}
			c, err := Choose(context.Background(), env)
			if tc.wantErr == nil {
				if err != nil || c.Name != tc.wantSource || string(c.Data) != tc.wantData {
					t.Fatalf("Choose = %s %q, %v; want %s %q", c.Name, c.Data, err, tc.wantSource, tc.wantData)
				}
			} else {
				if err == nil || errors.Is(err, ErrAbsent) {
					t.Fatalf("Choose = %s %q, %v; want an error, not a config nor ErrAbsent (the agent would wait)", c.Name, c.Data, err)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
			}
			if (c.SetAside != nil) != tc.wantAside {
				t.Fatalf("set aside: %+v, want %v", c.SetAside, tc.wantAside)
			}
			if tc.wantAside && c.SetAside.String() != mismatch {
				t.Errorf("set aside: %q, want %q", c.SetAside, mismatch)
			}
			if tc.wantHits >= 0 && hits.Load() != tc.wantHits {
				t.Errorf("%d requests, want %d", hits.Load(), tc.wantHits)
			}
		})
	}
}

// The state source itself never hands over a stored config that is not
// the pinned one, for a caller that does not go through Choose.
func TestStateSourceRefusesAStoredConfigThatIsNotPinned(t *testing.T) {
	root := t.TempDir()
	write(t, root, StateConfigPath, "stored")
	write(t, root, fwCfgPath, "fw")
	env := Env{Root: root, StateMounted: true, Cmdline: HashArg + "=" + ignition.Hash([]byte("pinned")), Sys: noSys{}, Fetcher: NewFetcher(nil)}
	name, data, err := First(context.Background(), Standard(env))
	var aside *SetAsideError
	if name != State || data != nil || !errors.As(err, &aside) || aside.Stored != ignition.Hash([]byte("stored")) {
		t.Fatalf("First = %s %q, %v; want the state source to refuse its copy", name, data, err)
	}
}

func sha256Of(t *testing.T, data string) string {
	t.Helper()
	h, err := ignition.HashLike([]byte(data), "sha256-"+strings.Repeat("0", 64))
	if err != nil {
		t.Fatal(err)
	}
	return h
}
