package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kiln-project/kiln/images"
)

// installPayload places every payload file into the root filesystem after
// checking its sha256. The Kubernetes components arrive this way, from a
// local build or from official release URLs.
func (b *build) installPayload(ctx context.Context) error {
	for i, f := range b.spec.Payload.Files {
		data, err := fetchVerified(ctx, b.spec.Dir, f)
		if err != nil {
			return fmt.Errorf("payload.files[%d] (%s): %w", i, f.Path, err)
		}
		mode := os.FileMode(0o644)
		if f.Mode != "" {
			m, _ := strconv.ParseUint(f.Mode, 8, 32) // validated with the spec
			mode = os.FileMode(m)
		}
		if err := writeFiles(b.rootfs, []file{{path: f.Path, data: string(data), mode: mode}}); err != nil {
			return err
		}
		b.binaries = append(b.binaries, digestBytes(f.Path, data))
	}
	return nil
}

// fetchVerified reads a payload source (a path relative to the spec, a
// file:// URL or an http(s) URL) and refuses content whose sha256 differs
// from the pinned one.
func fetchVerified(ctx context.Context, specDir string, f images.PayloadFile) ([]byte, error) {
	data, err := fetchSource(ctx, specDir, f.Source)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != f.SHA256 {
		return nil, fmt.Errorf("sha256 mismatch for %s: got %s, the spec pins %s", f.Source, got, f.SHA256)
	}
	return data, nil
}

func fetchSource(ctx context.Context, specDir, src string) ([]byte, error) {
	if !strings.Contains(src, "://") {
		if !filepath.IsAbs(src) {
			src = filepath.Join(specDir, src)
		}
		return os.ReadFile(src)
	}
	u, err := url.Parse(src)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "file" {
		return os.ReadFile(u.Path)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", src, resp.Status)
	}
	return io.ReadAll(resp.Body)
}
