package firstboot

import (
	"context"
	"errors"
	"time"

	"github.com/coreos/ignition/v2/config/v3_5/types"
	"github.com/kiln-project/kiln/firstboot/source"
	"github.com/kiln-project/kiln/internal/retry"
)

type ignitionConfig = types.Config

// config finds the node's config, waiting (and saying so on the console,
// at most once a minute) while there is none. It never guesses.
func (a *Agent) config(ctx context.Context, haveState bool) (string, []byte, error) {
	env := source.Env{Root: a.Root, StateMounted: haveState, Cmdline: a.cmdline(), Sys: a.Sys, Fetcher: a.fetcher,
		AllowUnverified: a.settings.AllowUnverifiedConfig, Log: a.logf}
	if a.Wait == 0 {
		return a.configOnce(ctx, env)
	}
	var c source.Choice
	var found error // what a source said other than that it has no config
	var lastSaid time.Time
	err := retry.WaitEvery(ctx, "a config", retry.NoBound, a.Wait, nil, func(context.Context) error {
		var err error
		c, err = source.Choose(ctx, env)
		if !errors.Is(err, source.ErrAbsent) {
			found = err
			return retry.Final(errFound)
		}
		if time.Since(lastSaid) >= time.Minute {
			a.status.State = "waiting"
			a.writeStatus()
			a.console("waiting for a config (none in: state, embedded, fw_cfg opt/com.coreos/config, ignition.config.url=, config drive labelled %s)", source.ConfigDriveLabel)
			lastSaid = time.Now()
		}
		return err
	})
	if !errors.Is(err, errFound) {
		return "", nil, ctx.Err()
	}
	if found == nil {
		a.chosen(c)
	}
	return c.Name, c.Data, found
}

// chosen says where the config came from and, when a pin set the stored
// config aside, which config replaces it.
func (a *Agent) chosen(c source.Choice) {
	switch {
	case c.SetAside != nil && source.Verified(c.Name):
		a.step("%s: using the verified config from %s", c.SetAside, c.Name)
	case c.SetAside != nil:
		a.step("%s: using the config from %s (%s= does not bind it)", c.SetAside, c.Name, source.HashArg)
	}
	a.step("config from %s", c.Name)
}

// errFound ends the wait for a config: a source had one, or failed.
var errFound = errors.New("a source answered")

// configOnce looks for the config once.
func (a *Agent) configOnce(ctx context.Context, env source.Env) (string, []byte, error) {
	c, err := source.Choose(ctx, env)
	switch {
	case err == nil:
		a.chosen(c)
	case errors.Is(err, source.ErrAbsent):
		return "", nil, errors.New("no config found (state, embedded, fw_cfg, ignition.config.url=, config drive " + source.ConfigDriveLabel + ")")
	}
	return c.Name, c.Data, err
}
