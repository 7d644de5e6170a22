package clustercheck

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/internal/retry"
)

func TestAnonymousLimited(t *testing.T) {
	for _, tc := range []struct {
		name      string
		api, live int
		wantErr   string
		final     bool
	}{
		{"health only", http.StatusUnauthorized, http.StatusOK, "", false},
		{"forbidden by RBAC", http.StatusForbidden, http.StatusOK, "", false},
		{"anonymous reads /api", http.StatusOK, http.StatusOK, "anonymous GET /api: 200, want 401 or 403", true},
		{"health refused", http.StatusUnauthorized, http.StatusUnauthorized, "anonymous GET /readyz: 401, want 200", true},
		{"not ready yet", http.StatusUnauthorized, http.StatusInternalServerError, "anonymous GET /readyz: 500, want 200", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/api" {
					w.WriteHeader(tc.api)
					return
				}
				w.WriteHeader(tc.live)
			}))
			defer srv.Close()
			err := AnonymousLimited(context.Background(), srv.Client(), srv.URL)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("err = %v, want %q", err, tc.wantErr)
			}
			if got := errors.Is(err, retry.ErrFinal); got != tc.final {
				t.Errorf("final = %t, want %t (a violation stops a wait, a busy apiserver does not)", got, tc.final)
			}
		})
	}
}

func TestEncryptedAtRest(t *testing.T) {
	const plain = "kiln-plaintext-1"
	for _, tc := range []struct {
		name    string
		raw     string
		wantErr string
	}{
		{"secretbox", "k8s:enc:secretbox:v1:kiln-1:\x8a\x01\x02", ""},
		{"stored as protobuf", "k8s\x00\n\x0c\n\x02v1\x12\x06Secret" + plain, "in plaintext"},
		{"not encrypted, no plaintext", "k8s\x00\n\x0c\n\x02v1\x12\x06Secret", "want \"k8s:enc:\""},
		{"missing", "", "not in etcd"},
	} {
		err := EncryptedAtRest([]byte(tc.raw), plain)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}
