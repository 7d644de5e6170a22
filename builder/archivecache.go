package builder

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kiln-project/kiln/builder/ociimage"
	"github.com/kiln-project/kiln/internal/atomicfile"
)

// The image archive cache. Packing an archive gzips its binaries (about
// 400 MB for the control plane, 15-20 s of a warm build); the archive is a
// function of the spec alone (files by content, modes, entrypoint, epoch),
// so it is kept under a hash of that and linked into the next build.
const archiveCacheVersion = "archive-cache v2" // v2: gzip best compression (v3, uncompressed layers, was withdrawn: a node imported them 2.3x slower)

// archiveCache is the cache directory: <key>.tar beside <key>.json (the
// archive's reference and digest).
type archiveCache struct{ dir string }

// archiveKey hashes everything ociimage.Write makes the archive from.
func archiveKey(s ociimage.Spec) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%q\n%d\n", archiveCacheVersion, s.Ref, s.Entrypoint, s.Created.Unix())
	if s.Level != 0 {
		fmt.Fprintf(h, "gzip level %d\n", s.Level)
	}
	for _, f := range s.Files {
		fmt.Fprintf(h, "%s %o\n", f.Path, f.Mode)
		src, err := os.Open(f.Source)
		if err != nil {
			return "", fmt.Errorf("image %s: %w", s.Ref, err)
		}
		_, err = io.Copy(h, src)
		src.Close()
		if err != nil {
			return "", fmt.Errorf("image %s: reading %s: %w", s.Ref, f.Source, err)
		}
		fmt.Fprintln(h)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// write produces the archive for s at dst: linked from the cache when
// it holds one for the same key, else written and then cached.
func (c archiveCache) write(s ociimage.Spec, dst string) (res ociimage.Result, cached bool, err error) {
	key, err := archiveKey(s)
	if err != nil {
		return res, false, err
	}
	tar, meta := filepath.Join(c.dir, key+".tar"), filepath.Join(c.dir, key+".json")
	if data, err := os.ReadFile(meta); err == nil && json.Unmarshal(data, &res) == nil && res.Digest != "" {
		if err := linkOrCopy(tar, dst); err == nil {
			res.Path = dst
			return res, true, nil
		}
	}
	if res, err = ociimage.Write(s, dst); err != nil {
		return res, false, err
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return res, false, err
	}
	if err := linkOrCopy(dst, tar); err != nil {
		return res, false, fmt.Errorf("caching image %s: %w", s.Ref, err)
	}
	data, err := json.Marshal(ociimage.Result{Ref: res.Ref, Digest: res.Digest})
	if err != nil {
		return res, false, err
	}
	return res, false, atomicfile.WriteFile(meta, data, 0o644, nil)
}

// linkOrCopy makes dst a hard link to src (the cache and the build's work
// directory share a filesystem), or a copy where they do not; an existing
// dst is replaced.
func linkOrCopy(src, dst string) error {
	tmp := dst + ".link"
	os.Remove(tmp)
	if err := os.Link(src, tmp); err != nil {
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := atomicfile.WriteFile(dst, data, 0o644, nil); err != nil {
			return err
		}
		return nil
	}
	return os.Rename(tmp, dst)
}
