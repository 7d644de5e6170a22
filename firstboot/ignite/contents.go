package ignite

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/coreos/ignition/v2/config/v3_5/types"
	"github.com/kiln-project/kiln/internal/ignition"
)

// Fetcher reads remote contents (http, https, tftp).
type Fetcher interface {
	Fetch(ctx context.Context, rawURL string) ([]byte, error)
}

// Sources is where a plan's remote contents come from, and whether one
// fetched over plain http or tftp may go without its own hash.
type Sources struct {
	Fetcher Fetcher
	// AllowUnverified is the image's configTrust.allowUnverified: a
	// content over http or tftp with no verification.hash is then taken.
	AllowUnverified bool
}

// resolve returns a resource's bytes: fetched or decoded, decompressed,
// then hash-checked. A content over plain http or tftp needs its own
// hash: the config's pin covers the config's bytes, not what its URLs
// return, and anyone on the path can answer for them.
func resolve(ctx context.Context, src Sources, r types.Resource) ([]byte, error) {
	if r.Source == nil {
		return nil, nil
	}
	source := *r.Source
	if source == "" {
		// An empty file, as in coreos/ignition, whose fetch of scheme ""
		// returns no data (FetchToBuffer, internal/resource/url.go).
		return []byte{}, verify(nil, r.Verification.Hash, "the content")
	}
	if scheme := plainScheme(source); scheme != "" && r.Verification.Hash == nil && !src.AllowUnverified {
		return nil, fmt.Errorf("%s: fetched over %s with no verification.hash: anyone on the network path could answer for it "+
			"(give it a verification.hash, serve it over https, or build the image with configTrust.allowUnverified: true)", shorten(ignition.RedactURL(source)), scheme)
	}
	var data []byte
	var err error
	if strings.HasPrefix(source, "data:") {
		data, err = decodeDataURL(source)
	} else {
		data, err = src.Fetcher.Fetch(ctx, source)
	}
	if err != nil {
		return nil, err
	}
	what := "the content"
	if r.Compression != nil && *r.Compression == "gzip" {
		if data, err = gunzip(data); err != nil {
			return nil, fmt.Errorf("%s: %w", shorten(source), err)
		}
		what = "the decompressed content"
	}
	if err := verify(data, r.Verification.Hash, what); err != nil {
		return nil, fmt.Errorf("%s: %w", shorten(source), err)
	}
	return data, nil
}

// plainScheme is a source's scheme when nothing authenticates what it
// returns (http, tftp), else "".
func plainScheme(source string) string {
	u, err := url.Parse(source)
	if err != nil {
		return ""
	}
	switch s := strings.ToLower(u.Scheme); s {
	case "http", "tftp":
		return s
	}
	return ""
}

// maxDecompressed bounds one gzip content once decompressed: a plan is
// held in memory until it is applied, and a few KiB of config can
// otherwise decompress to more than the node has.
var maxDecompressed int64 = 256 << 20

func gunzip(data []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxDecompressed+1))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	if int64(len(out)) > maxDecompressed {
		return nil, fmt.Errorf("decompressed size exceeds %s", sizeString(maxDecompressed))
	}
	return out, nil
}

// sizeString is n in whole MiB when it is a whole number of them.
func sizeString(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// verify checks "sha256-<hex>" or "sha512-<hex>" against the
// decompressed bytes. The spec (3.0 to 3.5) says "If compression is
// specified, the hash describes the decompressed file", and coreos/ignition
// hashes the stream its decompressor yields (decompressCopyHashAndVerify in
// internal/resource/url.go), so a config written for Ignition verifies here.
func verify(data []byte, want *string, what string) error {
	if want == nil {
		return nil
	}
	return ignition.VerifyHash(data, *want, what)
}

// decodeDataURL decodes an RFC 2397 data URL.
func decodeDataURL(s string) ([]byte, error) {
	meta, payload, ok := strings.Cut(strings.TrimPrefix(s, "data:"), ",")
	if !ok {
		return nil, fmt.Errorf("data URL has no comma")
	}
	if strings.HasSuffix(meta, ";base64") {
		b, err := base64.StdEncoding.DecodeString(payload)
		if err != nil {
			b, err = base64.RawStdEncoding.DecodeString(payload)
		}
		if err != nil {
			return nil, fmt.Errorf("data URL: %w", err)
		}
		return b, nil
	}
	out, err := url.PathUnescape(payload)
	if err != nil {
		return nil, fmt.Errorf("data URL: %w", err)
	}
	return []byte(out), nil
}

func shorten(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}
