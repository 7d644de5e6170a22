package builder

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/kiln-project/kiln/contract/layout"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/firstboot/imageconf"
	"github.com/kiln-project/kiln/firstboot/units"
)

// Paths of the agent in the image; docs/architecture.md names them too.
const (
	agentBinary    = nodefile.KilnBinary
	unitDir        = "/usr/lib/systemd/system"
	embeddedConfig = layout.EmbeddedConfigPath
)

// installAgent bakes in the kiln binary, the agent's units (enabled), its
// settings from the spec's configTrust, and the spec's embedded Ignition
// config if it names one.
func (b *build) installAgent(ctx context.Context) error {
	data, err := os.ReadFile(b.opts.KilnBinary)
	if err != nil {
		return fmt.Errorf("reading the kiln binary to bake in: %w", err)
	}
	files := []file{{path: agentBinary, data: string(data), mode: 0o755}}
	if b.opts.TestFailHealthGate {
		files = append(files, file{path: layout.FailGateSwitch, mode: 0o644,
			data: "kiln build --test-fail-health-gate: a trying boot of this image fails its health gate on purpose\n"})
	}
	var enable []string
	for _, u := range units.All() {
		files = append(files, file{path: filepath.Join(unitDir, u.Name), data: string(u.Contents), mode: 0o644})
		if u.Enabled {
			enable = append(enable, u.Name)
		}
	}
	trust, err := b.agentSettings()
	if err != nil {
		return err
	}
	files = append(files, trust...)
	if b.spec.Ignition != "" {
		cfg, err := os.ReadFile(b.specPath(b.spec.Ignition))
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

// agentSettings are the spec's configTrust as the agent reads it
// (imageconf.Path) and the CA bundles it names, each checked to hold
// only certificates.
func (b *build) agentSettings() ([]file, error) {
	set := imageconf.Settings{AllowUnverifiedConfig: b.spec.ConfigTrust.AllowUnverified}
	var files []file
	for i, src := range b.spec.ConfigTrust.CABundles {
		data, err := os.ReadFile(b.specPath(src))
		if err != nil {
			return nil, fmt.Errorf("configTrust.caBundles[%d]: %w", i, err)
		}
		if err := imageconf.AddPEM(x509.NewCertPool(), data); err != nil {
			return nil, fmt.Errorf("configTrust.caBundles[%d] (%s): %w", i, src, err)
		}
		dst := path.Join(imageconf.CADir, fmt.Sprintf("%d-%s", i, filepath.Base(src)))
		set.CABundles = append(set.CABundles, dst)
		files = append(files, file{path: dst, data: string(data), mode: 0o644})
	}
	return append(files, file{path: imageconf.Path, data: string(set.Marshal()), mode: 0o644}), nil
}

// specPath resolves a path the spec gives against the spec's directory.
func (b *build) specPath(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(b.spec.Dir, p)
}
