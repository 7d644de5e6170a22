package catalog

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kiln-project/kiln/internal/atomicfile"
)

// Runner runs ctr on the node.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// Namespace is containerd's namespace for the kubelet's images.
const Namespace = "k8s.io"

// ImportedDir holds one stamp per imported catalog digest, on the state
// partition beside containerd's own store. containerd names a docker
// archive's image by a digest of its own making, so the stamp is what
// ties the catalog's digest to the import.
const ImportedDir = "/var/lib/kiln/images-imported"

// Import loads every archive containerd does not already hold from an
// earlier import, in the catalog's order. The images live on the state
// partition, so a node imports once and every later boot only checks.
// ready, when not nil, is called once the first boot images are in
// containerd (ForRole's count): what the kubelet waits for.
func (c *Catalog) Import(ctx context.Context, root string, ctr Runner, log io.Writer, boot int, ready func()) error {
	out, err := ctr.Run(ctx, "ctr", "-n", Namespace, "images", "ls")
	if err != nil {
		return fmt.Errorf("listing containerd's images: %w", err)
	}
	have := parseImageList(string(out))
	for i, im := range c.Images {
		if i == boot && ready != nil {
			ready()
		}
		stamp := filepath.Join(root, ImportedDir, strings.TrimPrefix(im.Digest, "sha256:"))
		if _, err := os.Stat(stamp); err == nil && have[im.Ref] != "" {
			continue
		}
		start := time.Now()
		if _, err := ctr.Run(ctx, "ctr", "-n", Namespace, "images", "import", filepath.Join(root, im.Archive)); err != nil {
			return fmt.Errorf("importing %s from %s: %w", im.Ref, im.Archive, err)
		}
		if err := atomicfile.WriteFile(stamp, []byte(im.Ref+"\n"), 0o644, nil); err != nil {
			return err
		}
		fmt.Fprintf(log, "imported %s (%s) in %s\n", im.Ref, im.Digest, time.Since(start).Round(time.Millisecond))
	}
	if boot >= len(c.Images) && ready != nil {
		ready()
	}
	return nil
}

// parseImageList reads `ctr images ls`: REF TYPE DIGEST ... per line.
func parseImageList(out string) map[string]string {
	have := map[string]string{}
	for i, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 3 {
			continue
		}
		have[f[0]] = f[2]
	}
	return have
}
