// Package source finds the node's Ignition config. Sources are tried in a
// fixed order and the first that has a config wins; each is named in the
// log so an operator can tell where a node's config came from. On a boot
// whose kernel command line pins the config (kiln.config.hash=), the
// copy stored on the state partition is used only when it is the pinned
// config (Choose).
package source

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kiln-project/kiln/contract/layout"
	"github.com/kiln-project/kiln/internal/command"
	"github.com/kiln-project/kiln/internal/ignition"
)

// ErrAbsent means a source has no config (as opposed to a broken one).
var ErrAbsent = errors.New("no config")

// Source is one place a config can come from.
type Source struct {
	Name  string
	Fetch func(ctx context.Context) ([]byte, error)
}

// Names of the sources, as they appear in logs and the status line.
const (
	State       = "state"
	Embedded    = "embedded"
	FwCfg       = "fw_cfg"
	URL         = "url"
	ConfigDrive = "config-drive"
)

// Paths, relative to the node's root.
const (
	StateConfigPath    = layout.StateConfigPath
	StateHashPath      = layout.StateConfigHashPath
	EmbeddedConfigPath = layout.EmbeddedConfigPath
	fwCfgPath          = "/sys/firmware/qemu_fw_cfg/by_name/opt/com.coreos/config/raw"
	ConfigDriveLabel   = layout.ConfigDriveLabel
)

// Env describes the node the sources read from.
type Env struct {
	Root         string         // "/" on a node; a temp dir in tests
	StateMounted bool           // the state partition is mounted: its copy comes first
	Cmdline      string         // the kernel command line
	Sys          command.Runner // modprobe, blkid, mount, umount
	Fetcher      *Fetcher
	// AllowUnverified lets a config from http, tftp or a config drive be
	// used without kiln.config.hash= (the image spec's
	// configTrust.allowUnverified).
	AllowUnverified bool
	Log             func(format string, args ...any)
}

// Standard returns the sources in the order the agent tries them.
func Standard(env Env) []Source {
	var out []Source
	if env.StateMounted {
		out = append(out, Source{State, env.stored})
	}
	return append(out,
		Source{Embedded, fileSource(env.path(EmbeddedConfigPath))},
		Source{FwCfg, env.fwCfg},
		Source{URL, env.url},
		Source{ConfigDrive, env.configDrive},
	)
}

// First tries sources in order and returns the first config found. A
// source that fails (rather than being absent) stops the search: a broken
// config must be reported, never skipped in favour of the next one.
func First(ctx context.Context, sources []Source) (name string, cfg []byte, err error) {
	for _, s := range sources {
		data, err := s.Fetch(ctx)
		switch {
		case errors.Is(err, ErrAbsent):
			continue
		case err != nil:
			return s.Name, nil, fmt.Errorf("config source %s: %w", s.Name, err)
		}
		return s.Name, data, nil
	}
	return "", nil, ErrAbsent
}

// Choice is the config Choose found.
type Choice struct {
	Name string
	Data []byte
	// SetAside is the stored config a pinned boot did not use; nil when
	// none was set aside.
	SetAside *SetAside
}

// Choose finds the node's config: the first of Standard's sources to
// have one. On a pinned boot (kiln.config.hash=) a stored config whose
// hash is not the pin is set aside, and the other sources are tried in
// their order, each under its usual rule, as on a first boot. When none
// of them has a config, or one fails, the stored copy is still not used:
// Choose fails, naming both hashes. Without a pin the stored copy wins.
func Choose(ctx context.Context, env Env) (Choice, error) {
	aside, err := env.checkStored()
	if err != nil {
		return Choice{Name: State}, fmt.Errorf("config source %s: %w", State, err)
	}
	if aside != nil {
		env.StateMounted = false
		wait := ""
		if CmdlineArg(env.Cmdline, "ignition.config.url") != "" {
			wait = env.Fetcher.bound()
		}
		env.logf("the stored config is not the one %s= pins: taking the config from the other sources%s", HashArg, wait)
	}
	name, data, err := First(ctx, Standard(env))
	c := Choice{Name: name, Data: data, SetAside: aside}
	switch {
	case aside == nil:
		return c, err
	case errors.Is(err, ErrAbsent):
		return c, fmt.Errorf("%s, and no other source has a config (embedded, fw_cfg, ignition.config.url=, config drive %s); nothing was changed", aside, ConfigDriveLabel)
	case err != nil:
		return c, fmt.Errorf("%w; %s, so it is not used either; nothing was changed", err, aside)
	}
	return c, nil
}

func (e Env) path(p string) string { return filepath.Join(e.Root, p) }

func fileSource(path string) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) {
		data, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil, ErrAbsent
		}
		if err != nil {
			return nil, err
		}
		return data, nil
	}
}

func (e Env) fwCfg(ctx context.Context) ([]byte, error) {
	if e.Sys != nil {
		e.Sys.Run(ctx, "modprobe", "qemu_fw_cfg") // absent on real hardware: fine
	}
	return fileSource(e.path(fwCfgPath))(ctx)
}

func (e Env) url(ctx context.Context) ([]byte, error) {
	raw := CmdlineArg(e.Cmdline, "ignition.config.url")
	if raw == "" {
		return nil, ErrAbsent
	}
	u := substitute(raw, nodeFacts(e.Root))
	p, err := e.pin("the config from "+ignition.RedactURL(u), plainURL(u))
	if err != nil {
		return nil, err
	}
	data, err := e.Fetcher.Fetch(ctx, u)
	if err != nil {
		return nil, err
	}
	return data, p.check(data)
}

func (e Env) configDrive(ctx context.Context) ([]byte, error) {
	dev := e.path("/dev/disk/by-label/" + ConfigDriveLabel)
	if _, err := os.Stat(dev); err != nil {
		return nil, ErrAbsent
	}
	p, err := e.pin("the config on the "+ConfigDriveLabel+" drive", true)
	if err != nil {
		return nil, err
	}
	mnt, err := os.MkdirTemp(e.path("/run"), "kiln-config-drive-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(mnt)
	// Anyone at the machine can make this drive: nothing on it is run.
	if _, err := e.Sys.Run(ctx, "mount", "-o", "ro,nosuid,nodev,noexec", dev, mnt); err != nil {
		return nil, fmt.Errorf("mounting %s: %w", dev, err)
	}
	defer e.Sys.Run(context.Background(), "umount", mnt)
	data, err := os.ReadFile(filepath.Join(mnt, "config.ign"))
	if err != nil {
		return nil, fmt.Errorf("config drive %s: %w", ConfigDriveLabel, err)
	}
	return data, p.check(data)
}

// CmdlineArg returns the value of key=value on a kernel command line.
func CmdlineArg(cmdline, key string) string {
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}
