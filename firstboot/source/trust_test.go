package source

import (
	"context"
	"errors"
	"fmt"
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

const served = `{"ignition":{"version":"3.4.0"}}`

// A config from http or tftp is used only when kiln.config.hash= pins it
// or the image allows unverified configs; https is verified by TLS. A
// refused config is not even fetched.
func TestPlainURLConfigNeedsAHash(t *testing.T) {
	var hits atomic.Int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte(served))
	})
	plain := httptest.NewServer(handler)
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(handler)
	defer tlsSrv.Close()
	good, bad := HashArg+"="+ignition.Hash([]byte(served)), HashArg+"="+ignition.Hash([]byte("another node's config"))
	tests := []struct {
		name            string
		url, args       string
		allowUnverified bool
		wantErr         string // "" when the config is used
		wantHits        int32
	}{
		{"http without a hash is refused", plain.URL + "/n.ign", "", false, "refusing the config from " + plain.URL + "/n.ign", 0},
		{"tftp without a hash is refused", "tftp://127.0.0.1:9/n.ign", "", false, "no " + HashArg + "=", 0},
		{"http with its hash", plain.URL + "/n.ign", good, false, "", 1},
		{"http with another hash", plain.URL + "/n.ign", bad, false, "verification failed: the config from " + plain.URL + "/n.ign is sha512-", 1},
		{"http with a malformed hash", plain.URL + "/n.ign", HashArg + "=sha512-xyz", false, "kernel argument " + HashArg + "=", 0},
		{"http allowed unverified by the image", plain.URL + "/n.ign", "", true, "", 1},
		{"a hash still binds when unverified is allowed", plain.URL + "/n.ign", bad, true, "verification failed", 1},
		{"https without a hash", tlsSrv.URL + "/n.ign", "", false, "", 1},
		{"https with another hash", tlsSrv.URL + "/n.ign", bad, false, "verification failed", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hits.Store(0)
			f := &Fetcher{Client: tlsSrv.Client(), Timeout: 2 * time.Second, Retry: 50 * time.Millisecond}
			env := Env{Root: t.TempDir(), Cmdline: "console=ttyS0 ignition.config.url=" + tc.url + " " + tc.args, Sys: noSys{}, Fetcher: f, AllowUnverified: tc.allowUnverified}
			name, data, err := First(context.Background(), Standard(env))
			if tc.wantErr == "" {
				if err != nil || name != URL || string(data) != served {
					t.Fatalf("First = %s %q, %v; want the url config", name, data, err)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("First = %s %q, %v; want an error containing %q", name, data, err, tc.wantErr)
			}
			if hits.Load() != tc.wantHits {
				t.Errorf("%d requests, want %d", hits.Load(), tc.wantHits)
			}
		})
	}
}

// mountSys "mounts" a config drive by putting config.ign in the mount point.
type mountSys struct{ mounted, options []string }

func (m *mountSys) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	if name == "mount" {
		m.mounted = append(m.mounted, args[len(args)-1])
		if len(args) > 1 && args[0] == "-o" {
			m.options = append(m.options, args[1])
		}
		return nil, os.WriteFile(filepath.Join(args[len(args)-1], "config.ign"), []byte(served), 0o600)
	}
	return nil, nil
}

// Anyone at the machine can plug in a drive labelled KILN-CONFIG: its
// config is held to the same rule as one fetched over http.
func TestConfigDriveNeedsAHash(t *testing.T) {
	tests := []struct {
		name            string
		args            string
		allowUnverified bool
		wantErr         string
		wantMount       bool
	}{
		{"without a hash it is refused unmounted", "", false, "refusing the config on the KILN-CONFIG drive", false},
		{"with its hash", HashArg + "=" + ignition.Hash([]byte(served)), false, "", true},
		{"with another hash", HashArg + "=" + ignition.Hash(nil), false, "verification failed", true},
		{"allowed unverified by the image", "", true, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, "/dev/disk/by-label/"+ConfigDriveLabel, "")
			os.MkdirAll(filepath.Join(root, "run"), 0o755)
			sys := &mountSys{}
			env := Env{Root: root, Cmdline: tc.args, Sys: sys, Fetcher: NewFetcher(nil), AllowUnverified: tc.allowUnverified}
			name, data, err := First(context.Background(), Standard(env))
			if tc.wantErr == "" {
				if err != nil || name != ConfigDrive || string(data) != served {
					t.Fatalf("First = %s %q, %v; want the drive's config", name, data, err)
				}
			} else {
				var uv *UnverifiedError
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("First = %s %q, %v; want an error containing %q", name, data, err, tc.wantErr)
				}
				if tc.args == "" && !errors.As(err, &uv) {
					t.Errorf("error %v is not an *UnverifiedError", err)
				}
			}
			if got := len(sys.mounted) > 0; got != tc.wantMount {
				t.Errorf("mounted: %v, want %v", got, tc.wantMount)
			}
			// anyone at the machine can make the drive: nothing on it runs
			for _, o := range sys.options {
				if o != "ro,nosuid,nodev,noexec" {
					t.Errorf("the drive is mounted -o %s, want ro,nosuid,nodev,noexec", o)
				}
			}
			if len(sys.options) != len(sys.mounted) {
				t.Errorf("mounted %d times, %d with options", len(sys.mounted), len(sys.options))
			}
		})
	}
}

// A password in ignition.config.url= never reaches a console line: not
// in the retries' log, not in the errors the agent prints.
func TestConfigURLPasswordIsNeverShown(t *testing.T) {
	missing := httptest.NewServer(http.NotFoundHandler())
	defer missing.Close()
	withPassword := func(u string) string { return strings.Replace(u, "://", "://ops:s3cret-pw@", 1) }
	tests := []struct {
		name, url, args string
		wantShown       string // what the messages show instead
	}{
		{"http answering 404, pinned", withPassword(missing.URL) + "/n.ign", HashArg + "=" + ignition.Hash([]byte(served)), "ops:xxxxx@"},
		{"http refused for want of a pin", withPassword(missing.URL) + "/n.ign", "", "ops:xxxxx@"},
		{"a scheme kiln does not fetch", "ftp://ops:s3cret-pw@192.0.2.1/n.ign", HashArg + "=" + ignition.Hash([]byte(served)), "ops:xxxxx@"},
		{"not a URL", "http://ops:s3cret-pw@[::1/n.ign", HashArg + "=" + ignition.Hash([]byte(served)), "not a URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var logged strings.Builder
			logf := func(format string, args ...any) { fmt.Fprintf(&logged, format+"\n", args...) }
			f := &Fetcher{Client: missing.Client(), Timeout: 300 * time.Millisecond, Retry: 50 * time.Millisecond, Log: logf}
			env := Env{Root: t.TempDir(), Cmdline: "ignition.config.url=" + tc.url + " " + tc.args, Sys: noSys{}, Fetcher: f, Log: logf}
			_, _, err := First(context.Background(), Standard(env))
			if err == nil {
				t.Fatal("First found a config")
			}
			said := err.Error() + "\n" + logged.String()
			if strings.Contains(said, "s3cret-pw") {
				t.Errorf("the password is shown:\n%s", said)
			}
			if !strings.Contains(said, tc.wantShown) {
				t.Errorf("the messages do not show %q:\n%s", tc.wantShown, said)
			}
		})
	}
}
