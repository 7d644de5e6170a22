package builder

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kiln-project/kiln/builder/ociimage"
)

func TestArchiveCacheLinksTheSameArchiveAndRepacksOnChange(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "etcd")
	if err := os.WriteFile(bin, []byte("etcd v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := ociimage.Spec{Ref: "kiln.local/etcd:v3.6.5", Files: []ociimage.File{{Path: "/usr/local/bin/etcd", Source: bin, Mode: 0o755}},
		Entrypoint: []string{"/usr/local/bin/etcd"}, Created: time.Unix(1735689600, 0)}
	c := archiveCache{dir: filepath.Join(dir, "cache")}
	first, cached, err := c.write(spec, filepath.Join(dir, "a.tar"))
	if err != nil || cached {
		t.Fatalf("first write: cached %v, err %v", cached, err)
	}
	second, cached, err := c.write(spec, filepath.Join(dir, "b.tar"))
	if err != nil || !cached || second.Digest != first.Digest || second.Ref != first.Ref {
		t.Fatalf("second write: %+v cached %v err %v, want the first's %+v from the cache", second, cached, err, first)
	}
	a, _ := os.ReadFile(filepath.Join(dir, "a.tar"))
	b, _ := os.ReadFile(filepath.Join(dir, "b.tar"))
	if !bytes.Equal(a, b) {
		t.Fatal("the cached archive differs from the packed one")
	}
	os.WriteFile(bin, []byte("etcd v2"), 0o755)
	third, cached, err := c.write(spec, filepath.Join(dir, "c.tar"))
	if err != nil || cached || third.Digest == first.Digest {
		t.Fatalf("after the binary changed: %+v cached %v err %v, want a new archive", third, cached, err)
	}
}
