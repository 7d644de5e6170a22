package ignite

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/kiln-project/kiln/internal/atomicfile"
)

// unitDir is where a config's units go: /etc, rebuilt from the image and
// the config every boot.
const unitDir = "/etc/systemd/system"

// units writes unit files and drop-ins, masks, reloads systemd, then
// enables, disables and starts as the config says.
func (a *Applier) units(ctx context.Context, p *Plan) error {
	var enable, disable []string
	if len(p.Units) > 0 {
		if err := mkdirs(a.path(unitDir)); err != nil {
			return err
		}
	}
	for _, u := range p.Units {
		path := a.path(filepath.Join(unitDir, u.Name))
		if u.Mask != nil && *u.Mask {
			if err := atomicfile.Symlink("/dev/null", path); err != nil {
				return fmt.Errorf("masking %s: %w", u.Name, err)
			}
			continue
		}
		// As in Ignition, a unit with no contents or empty contents is not
		// written (its drop-ins and enabled then apply to the image's unit
		// of that name), while an empty drop-in is.
		if u.Contents != nil && *u.Contents != "" {
			if err := atomicfile.WriteFile(path, []byte(*u.Contents), 0o644, nil); err != nil {
				return fmt.Errorf("%s: %w", u.Name, err)
			}
		}
		for _, d := range u.Dropins {
			if d.Contents == nil {
				continue
			}
			dp := a.path(filepath.Join(unitDir, u.Name+".d", d.Name))
			if err := mkdirs(filepath.Dir(dp)); err != nil {
				return fmt.Errorf("%s drop-in %s: %w", u.Name, d.Name, err)
			}
			if err := atomicfile.WriteFile(dp, []byte(*d.Contents), 0o644, nil); err != nil {
				return fmt.Errorf("%s drop-in %s: %w", u.Name, d.Name, err)
			}
		}
		switch {
		case u.Enabled == nil:
		case *u.Enabled:
			enable = append(enable, u.Name)
		default:
			disable = append(disable, u.Name)
		}
	}
	if a.Systemd == nil || len(p.Units) == 0 {
		return nil
	}
	if err := a.Systemd.Reload(ctx); err != nil {
		return fmt.Errorf("daemon-reload: %w", err)
	}
	if len(disable) > 0 {
		if err := a.Systemd.Disable(ctx, disable); err != nil {
			return fmt.Errorf("disabling %v: %w", disable, err)
		}
	}
	if len(enable) == 0 {
		return nil
	}
	if err := a.Systemd.Enable(ctx, enable); err != nil {
		return fmt.Errorf("enabling %v: %w", enable, err)
	}
	// This boot's transaction was built before these units were wanted:
	// queue their start so they run in this boot too.
	for _, name := range enable {
		if err := a.Systemd.Start(ctx, name); err != nil {
			return fmt.Errorf("starting %s: %w", name, err)
		}
	}
	return nil
}
