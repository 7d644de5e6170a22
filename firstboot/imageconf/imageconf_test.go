package imageconf

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/firstboot/source"
)

func writeFile(t *testing.T, root, p, data string) {
	t.Helper()
	full := filepath.Join(root, p)
	os.MkdirAll(filepath.Dir(full), 0o755)
	if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		file    string // "" for no file
		want    Settings
		wantErr string
	}{
		{"no file: an earlier kiln's image gets the defaults", "", Settings{}, ""},
		{"as the builder writes it", string(Settings{AllowUnverifiedConfig: true, CABundles: []string{CADir + "/0-site.pem"}}.Marshal()),
			Settings{AllowUnverifiedConfig: true, CABundles: []string{CADir + "/0-site.pem"}}, ""},
		{"an unknown key", `{"allowUnverified": true}`, Settings{}, `unknown field "allowUnverified"`},
		{"not JSON", `allowUnverifiedConfig: true`, Settings{}, "image settings " + Path},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.file != "" {
				writeFile(t, root, Path, tc.file)
			}
			got, err := Load(root)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Load = %+v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got.AllowUnverifiedConfig != tc.want.AllowUnverifiedConfig || strings.Join(got.CABundles, ",") != strings.Join(tc.want.CABundles, ",") {
				t.Fatalf("Load = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// An https config server signed by the site's own CA is trusted once the
// image adds that CA, and not before.
func TestImageCABundleVerifiesTheConfigServer(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("cfg")) }))
	defer srv.Close()
	root := t.TempDir()
	bundle := CADir + "/0-site.pem"
	writeFile(t, root, bundle, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})))
	fetch := func(s Settings) error {
		pool, err := s.Roots(root)
		if err != nil {
			t.Fatal(err)
		}
		// Bounds with room for a loaded machine: one handshake took over 2 s
		// at nice 19 beside QEMU; the refused case retries until the bound.
		f := &source.Fetcher{Client: &http.Client{Timeout: 10 * time.Second}, Timeout: 10 * time.Second, Retry: time.Second}
		f.TrustRoots(pool)
		_, err = f.Fetch(context.Background(), srv.URL+"/n.ign")
		return err
	}
	if err := fetch(Settings{}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the bundle: %v, want a certificate error", err)
	}
	if err := fetch(Settings{CABundles: []string{bundle}}); err != nil {
		t.Errorf("with the bundle: %v", err)
	}
}

func TestBrokenBundleIsNamed(t *testing.T) {
	root := t.TempDir()
	for p, data := range map[string]string{"/a.pem": "not pem", "/b.pem": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"} {
		writeFile(t, root, p, data)
		if _, err := (Settings{CABundles: []string{p}}).Roots(root); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("bundle %s: %v, want an error naming it", p, err)
		}
	}
}
