package firstboot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/coreos/ignition/v2/config/v3_5/types"
	"github.com/kiln-project/kiln/firstboot/source"
)

type ignitionConfig = types.Config

// config finds the node's config, waiting (and saying so on the console,
// at most once a minute) while there is none. It never guesses.
func (a *Agent) config(ctx context.Context, haveState bool) (string, []byte, error) {
	cmdline, _ := os.ReadFile(filepath.Join(a.Root, "/proc/cmdline"))
	env := source.Env{Root: a.Root, StateMounted: haveState, Cmdline: string(cmdline), Sys: a.Sys, Fetcher: a.fetcher,
		AllowUnverified: a.settings.AllowUnverifiedConfig, Log: a.logf}
	var lastSaid time.Time
	for {
		name, raw, err := source.First(ctx, source.Standard(env))
		if !errors.Is(err, source.ErrAbsent) {
			if err == nil {
				a.step("config from %s", name)
			}
			return name, raw, err
		}
		if a.Wait == 0 {
			return "", nil, errors.New("no config found (state, embedded, fw_cfg, ignition.config.url=, config drive " + source.ConfigDriveLabel + ")")
		}
		if time.Since(lastSaid) >= time.Minute {
			a.status.State = "waiting"
			a.writeStatus()
			a.console("waiting for a config (none in: state, embedded, fw_cfg opt/com.coreos/config, ignition.config.url=, config drive labelled %s)", source.ConfigDriveLabel)
			lastSaid = time.Now()
		}
		select {
		case <-ctx.Done():
			return "", nil, ctx.Err()
		case <-time.After(a.Wait):
		}
	}
}
