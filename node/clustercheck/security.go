package clustercheck

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/kiln-project/kiln/internal/retry"
)

// AnonymousLimited is nil when a request with no credentials is refused
// on /api (401 or 403) and answered 200 on /readyz: anonymous access
// reaches the health endpoints only. client must present no client
// certificate and no token; base is the apiserver's https://host:port.
// A wrong answer is final (see retry.Wait); a 5xx or a failed request is an
// apiserver that may yet be ready, and is not.
func AnonymousLimited(ctx context.Context, client *http.Client, base string) error {
	for _, want := range []struct {
		path string
		ok   func(int) bool
		says string
	}{
		{"/api", func(c int) bool { return c == http.StatusUnauthorized || c == http.StatusForbidden }, "401 or 403"},
		{"/readyz", func(c int) bool { return c == http.StatusOK }, "200"},
	} {
		code, body, err := get(ctx, client, base+want.path)
		if err != nil {
			return fmt.Errorf("anonymous GET %s: %w", want.path, err)
		}
		if !want.ok(code) {
			err := fmt.Errorf("anonymous GET %s: %d, want %s: %s", want.path, code, want.says, retry.OneLine(fmt.Errorf("%s", body)))
			if code >= 500 {
				return err // an apiserver not ready yet, or too busy: worth asking again
			}
			return retry.Final(err)
		}
	}
	return nil
}

func get(ctx context.Context, client *http.Client, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, body, err
}

// EncryptedPrefix starts every value the apiserver's encryption
// providers write to etcd.
const EncryptedPrefix = "k8s:enc:"

// EncryptedAtRest is nil when raw, a Secret's value as etcd holds it,
// was written by an encryption provider and does not contain plaintext,
// a value of the Secret.
func EncryptedAtRest(raw []byte, plaintext string) error {
	switch {
	case len(raw) == 0:
		return fmt.Errorf("the Secret is not in etcd")
	case bytes.Contains(raw, []byte(plaintext)):
		return fmt.Errorf("etcd holds the Secret's value %q in plaintext", plaintext)
	case !bytes.HasPrefix(raw, []byte(EncryptedPrefix)):
		return fmt.Errorf("etcd's value starts %q, want %q", head(raw), EncryptedPrefix)
	}
	return nil
}

func head(b []byte) []byte {
	if len(b) > 24 {
		return b[:24]
	}
	return b
}
