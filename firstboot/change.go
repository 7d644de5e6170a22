package firstboot

// A config change: a boot whose config is not the one stored on the
// state partition (a pinned boot set the stored one aside) replaces it.
// Before anything is written the change must keep the node's identity
// (its node file's name, role, address and cluster). The replaced config
// is kept as config.ign.prev; when the new config fails, the node goes
// back to the config it replaces (or replaced) only when the new config
// names that config's hash in its node file's fallbackConfigs.
//
// Why the new config's list, and only it: the state partition is
// writable by whoever can plant a disk or forge its record, and a pin is
// the operator's word that this config, and nothing else, runs. A rule
// such as "fall back to whatever is stored" would let a forged state
// disk hold its own config, make the pinned one fail (a file in its way,
// a full disk) and have the node run the forged one: the bypass a pin
// exists to prevent. The list sits inside the pinned config, so the pin
// covers it, and the previous config is hashed from its bytes, never
// from the record beside it.
//
// The order of writes, each a temp file, fsync and rename, and what a
// power cut after each step leaves for the next boot:
//
//  1. config.ign.prev, then config.ign.prev.sha512: a copy of the stored
//     config. The stored config is still in place: the next boot does
//     what this one did (a pinned boot takes the new config again).
//  2. config.ign, then config.ign.sha512: the new config. A pinned boot
//     now finds the pinned config stored and uses it; a stale hash record
//     is rewritten, as it is never trusted.
//  3. firstboot.inprogress, then the config is applied, then the stamp
//     goes. A boot that dies in between applies the stored (new) config
//     again, and when it fails falls back to config.ign.prev.
//  4. On a fallback from a stored config that failed: config.ign, then
//     its hash, become the previous config again; the in-progress stamp
//     stays until the previous config is applied. A boot that dies
//     between finds the previous config stored: pinned to the new one it
//     sets it aside, takes the new config again, and falls back to the
//     stored one when that fails again.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kiln-project/kiln/contract/layout"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/firstboot/ignite"
	"github.com/kiln-project/kiln/firstboot/source"
	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/internal/ignition"
)

const (
	prevConfigPath = layout.PrevConfigPath
	prevHashPath   = layout.PrevConfigHashPath
)

// previous is the config this boot's config replaces (the stored one,
// while it is still stored) or replaced (config.ign.prev, once the new
// one is stored): the one it may fall back to.
type previous struct {
	raw  []byte
	hash string // of raw: the record beside it is not trusted
	path string // source.StateConfigPath or prevConfigPath
}

// stored reports whether the previous config is still the stored one.
func (p *previous) stored() bool { return p.path == source.StateConfigPath }

// previousConfig finds the config a config from the named source
// replaces: nil without a state partition, when there is none, or when
// it is this very config.
func (a *Agent) previousConfig(haveState bool, name string, raw []byte) (*previous, error) {
	if !haveState {
		return nil, nil
	}
	path := source.StateConfigPath
	if name == source.State {
		path = prevConfigPath
	}
	data, err := os.ReadFile(filepath.Join(a.Root, path))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading the previous config: %w", err)
	case bytes.Equal(data, raw):
		return nil, nil
	}
	return &previous{raw: data, hash: ignition.Hash(data), path: path}, nil
}

// nodeFile is the node file cfg writes; nil when it writes none.
func (a *Agent) nodeFile(ctx context.Context, cfg ignitionConfig) (*nodefile.NodeFile, error) {
	data, ok, err := ignite.FileContents(ctx, cfg, nodefile.Path, a.sources())
	if err != nil || !ok {
		return nil, err
	}
	nf, err := nodefile.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("node file %s: %w", nodefile.Path, err)
	}
	return nf, nil
}

// errIdentity is what a refused config change wraps.
var errIdentity = errors.New("config change refused")

// checkIdentity refuses a config that replaces the stored one and would
// change what the node is. A stored config that cannot be read (an
// earlier, laxer kiln stored it) gives nothing to compare: the pin, not
// this check, is what guards the node; the check catches a config meant
// for another node or cluster.
func (a *Agent) checkIdentity(ctx context.Context, cfg ignitionConfig, prev *previous) error {
	to, err := a.nodeFile(ctx, cfg)
	if err != nil {
		return fmt.Errorf("%w: %w", errIdentity, err)
	}
	old, _, err := ignition.Parse(prev.raw)
	if err != nil {
		a.step("the stored config %s does not parse (%s): its node file is not compared", prev.hash, oneLine(err.Error()))
		return nil
	}
	from, err := a.nodeFile(ctx, old)
	if err != nil {
		a.step("the stored config %s: %s: not compared", prev.hash, oneLine(err.Error()))
		return nil
	}
	const why = "a config change may not change a node's name, role, address or cluster: re-image it"
	switch {
	case from == nil:
		return nil
	case to == nil:
		return fmt.Errorf("%w: node file %s: the stored config has one, the new one none (%s)", errIdentity, nodefile.Path, why)
	}
	if diff := nodefile.IdentityChanges(from, to); diff != nil {
		return fmt.Errorf("%w: node file %s (%s)", errIdentity, strings.Join(diff, ", "), why)
	}
	return nil
}

// vouches reports whether the node file names data's hash among the
// configs to fall back to.
func vouches(nf *nodefile.NodeFile, data []byte) bool {
	if nf == nil {
		return false
	}
	for _, h := range nf.FallbackConfigs {
		if ignition.VerifyHash(data, h, "") == nil {
			return true
		}
	}
	return false
}

// fallBack answers the failure of this boot's config (cfg, raw): when
// the config names the previous one in its fallbackConfigs, the
// previous config is applied (and stored again); otherwise the failure
// stands, naming both hashes. unchanged says that the failure came
// before anything was written.
func (a *Agent) fallBack(ctx context.Context, cfg ignitionConfig, raw []byte, prev *previous, failure error, unchanged bool) error {
	tail := ""
	if unchanged {
		tail = "; nothing was changed"
	}
	if prev == nil {
		return fmt.Errorf("%w%s", failure, tail)
	}
	hash := ignition.Hash(raw)
	nf, err := a.nodeFile(ctx, cfg)
	if err != nil || !vouches(nf, prev.raw) {
		return fmt.Errorf("%w; the previous config %s is not one config %s names to fall back to, so it is not used%s", failure, prev.hash, hash, tail)
	}
	a.console("config %s failed: %s; falling back to the previous config %s, which it names", hash, oneLine(failure.Error()), prev.hash)
	v, err := a.validate(ctx, prev.raw, "the previous config "+prev.hash)
	if err != nil {
		return fmt.Errorf("config %s failed: %w; the previous config %s, which it names, failed too: %w", hash, failure, prev.hash, err)
	}
	if err := a.restore(prev); err != nil {
		return err
	}
	a.status.Source = source.State
	a.status.FellBack = &FellBack{Failed: hash, Applied: prev.hash, Reason: oneLine(failure.Error())}
	return a.apply(ctx, v, true, source.State, prev.raw, nil)
}

// restore makes the previous config the stored one again when the
// config that failed was stored in its place (this boot or an earlier
// one).
func (a *Agent) restore(prev *previous) error {
	if cur, err := os.ReadFile(filepath.Join(a.Root, source.StateConfigPath)); err == nil && bytes.Equal(cur, prev.raw) {
		return nil
	}
	if err := atomicfile.WriteFile(filepath.Join(a.Root, source.StateConfigPath), prev.raw, 0o600, nil); err != nil {
		return fmt.Errorf("restoring the previous config on the state partition: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(a.Root, source.StateHashPath), []byte(prev.hash+"\n"), 0o644, nil); err != nil {
		return fmt.Errorf("recording the restored config's hash: %w", err)
	}
	a.step("previous config restored on the state partition (%s)", prev.hash)
	return nil
}

// keep copies the stored config, which a new one is about to replace,
// to config.ign.prev with its hash beside it. It is a copy, not a
// rename: the stored config stays in place until the new one is
// written over it.
func (a *Agent) keep(prev *previous) error {
	if err := atomicfile.WriteFile(filepath.Join(a.Root, prevConfigPath), prev.raw, 0o600, nil); err != nil {
		return fmt.Errorf("keeping the previous config on the state partition: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(a.Root, prevHashPath), []byte(prev.hash+"\n"), 0o644, nil); err != nil {
		return fmt.Errorf("recording the previous config's hash: %w", err)
	}
	a.step("previous config kept as %s (%s)", prevConfigPath, prev.hash)
	return nil
}

// applyError is the applier's failure, after which a config may fall
// back; the agent's other failures (writing the state partition,
// reloading networkd) are not the config's.
type applyError struct{ err error }

func (e *applyError) Error() string { return e.err.Error() }
func (e *applyError) Unwrap() error { return e.err }
