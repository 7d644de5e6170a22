package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kiln-project/kiln/firstboot/units"
)

// Paths of the agent in the image; docs/architecture.md names them too.
const (
	agentBinary    = "/usr/bin/kiln"
	unitDir        = "/usr/lib/systemd/system"
	embeddedConfig = "/usr/lib/kiln/config.ign"
)

// installAgent bakes in the kiln binary, the agent's units (enabled), and
// the spec's embedded Ignition config if it names one.
func (b *build) installAgent(ctx context.Context) error {
	data, err := os.ReadFile(b.opts.KilnBinary)
	if err != nil {
		return fmt.Errorf("reading the kiln binary to bake in: %w", err)
	}
	files := []file{{path: agentBinary, data: string(data), mode: 0o755}}
	var enable []string
	for _, u := range units.All() {
		files = append(files, file{path: filepath.Join(unitDir, u.Name), data: string(u.Contents), mode: 0o644})
		if u.Enabled {
			enable = append(enable, u.Name)
		}
	}
	if b.spec.Ignition != "" {
		p := b.spec.Ignition
		if !filepath.IsAbs(p) {
			p = filepath.Join(b.spec.Dir, p)
		}
		cfg, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("ignition: reading the config to embed: %w", err)
		}
		files = append(files, file{path: embeddedConfig, data: string(cfg), mode: 0o600})
	}
	if err := writeFiles(b.rootfs, files); err != nil {
		return err
	}
	b.binaries = append(b.binaries, digestBytes(agentBinary, data))
	if len(enable) == 0 {
		return nil
	}
	return b.chroot(ctx, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, "systemctl", append([]string{"enable", "--quiet"}, enable...)...)
}
