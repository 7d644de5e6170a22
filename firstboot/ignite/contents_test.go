package ignite

import (
	"context"
	"strings"
	"testing"

	"github.com/coreos/ignition/v2/config/v3_5/types"

	"github.com/kiln-project/kiln/internal/ignition"
)

// servedFetch answers every URL with the same bytes, as a server on the
// path could.
type servedFetch []byte

func (s servedFetch) Fetch(context.Context, string) ([]byte, error) { return s, nil }

// A content fetched over plain http or tftp needs its own hash, unless
// the image allows unverified configs: the config's pin does not cover
// what its URLs return.
func TestPlainContentNeedsItsOwnHash(t *testing.T) {
	served := []byte("what the server said\n")
	good := ignition.Hash(served)
	tests := []struct {
		name            string
		source          string
		hash            *string
		allowUnverified bool
		wantErr         string // "" when the content is taken
	}{
		{"http without a hash", "http://192.0.2.1/motd", nil, false, "fetched over http with no verification.hash"},
		{"tftp without a hash", "tftp://192.0.2.1/motd", nil, false, "fetched over tftp with no verification.hash"},
		{"HTTP in capitals without a hash", "HTTP://192.0.2.1/motd", nil, false, "fetched over http with no verification.hash"},
		{"the password is not shown", "http://ops:s3cret@192.0.2.1/motd", nil, false, "ops:xxxxx@192.0.2.1"},
		{"http with its hash", "http://192.0.2.1/motd", &good, false, ""},
		{"http allowed unverified by the image", "http://192.0.2.1/motd", nil, true, ""},
		{"https without a hash", "https://192.0.2.1/motd", nil, false, ""},
		{"a data URL without a hash", "data:,inline", nil, false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := types.Resource{Source: &tc.source, Verification: types.Verification{Hash: tc.hash}}
			_, err := resolve(context.Background(), Sources{Fetcher: servedFetch(served), AllowUnverified: tc.allowUnverified}, r)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want an error saying %q", err, tc.wantErr)
			case err != nil && strings.Contains(err.Error(), "s3cret"):
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}
}
