// Package ignite applies a parsed Ignition config (internal/ignition) to a
// node: files, directories, links, users and groups, systemd units.
// Everything a config needs from the network is fetched and verified into
// a Plan before the first write, so a broken config changes nothing.
package ignite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/coreos/ignition/v2/config/v3_5/types"
)

// Plan is a config with every content resolved: applying it needs no
// network and cannot fail on a bad hash.
type Plan struct {
	Groups []types.PasswdGroup
	Users  []types.PasswdUser
	Dirs   []Dir
	Files  []File
	Links  []Link
	Units  []types.Unit
}

// Node is what files, directories and links share.
type Node struct {
	Path      string
	Overwrite bool
	User      types.NodeUser
	Group     types.NodeGroup
}

// Dir is a directory to create.
type Dir struct {
	Node
	Mode os.FileMode
}

// File is a file to write, with its contents already resolved.
type File struct {
	Node
	Mode        os.FileMode
	HasContents bool
	Contents    []byte
	Append      [][]byte
}

// Link is a symbolic or hard link.
type Link struct {
	Node
	Target string
	Hard   bool
}

// maxPlan bounds the file contents of one config together, once fetched
// and decompressed: the plan holds them in memory until it is applied,
// and each content alone may be up to maxDecompressed.
var maxPlan int64 = 512 << 20

// NewPlan resolves every content of cfg: data URLs are decoded, remote
// sources fetched, hashes verified, gzip undone.
func NewPlan(ctx context.Context, cfg types.Config, src Sources) (*Plan, error) {
	p := &Plan{Groups: cfg.Passwd.Groups, Users: cfg.Passwd.Users, Units: cfg.Systemd.Units}
	for _, d := range cfg.Storage.Directories {
		p.Dirs = append(p.Dirs, Dir{Node: node(d.Node), Mode: mode(d.Mode, 0o755)})
	}
	var total int64
	held := func(i int, path, field string, data []byte) error {
		if total += int64(len(data)); total > maxPlan {
			return fmt.Errorf("storage.files[%d] (%s): %s: the config's file contents add up to more than %s", i, path, field, sizeString(maxPlan))
		}
		return nil
	}
	for i, fl := range cfg.Storage.Files {
		pf := File{Node: node(fl.Node), Mode: mode(fl.Mode, 0o644), HasContents: fl.Contents.Source != nil}
		var err error
		if pf.Contents, err = resolve(ctx, src, fl.Contents); err != nil {
			return nil, fmt.Errorf("storage.files[%d] (%s): contents: %w", i, fl.Path, err)
		}
		if err := held(i, fl.Path, "contents", pf.Contents); err != nil {
			return nil, err
		}
		for j, a := range fl.Append {
			data, err := resolve(ctx, src, a)
			if err != nil {
				return nil, fmt.Errorf("storage.files[%d] (%s): append[%d]: %w", i, fl.Path, j, err)
			}
			if err := held(i, fl.Path, fmt.Sprintf("append[%d]", j), data); err != nil {
				return nil, err
			}
			pf.Append = append(pf.Append, data)
		}
		p.Files = append(p.Files, pf)
	}
	for _, l := range cfg.Storage.Links {
		target := ""
		if l.Target != nil {
			target = *l.Target
		}
		p.Links = append(p.Links, Link{Node: node(l.Node), Target: target, Hard: l.Hard != nil && *l.Hard})
	}
	return p, nil
}

func node(n types.Node) Node {
	return Node{Path: filepath.Clean(n.Path), Overwrite: n.Overwrite != nil && *n.Overwrite, User: n.User, Group: n.Group}
}

func mode(m *int, def os.FileMode) os.FileMode {
	if m == nil {
		return def
	}
	return os.FileMode(*m) & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky)
}

// FileContents resolves, as NewPlan does, the contents of the file cfg
// writes at path and nothing else: what the agent reads of a config
// before it decides to apply it (its node file). ok is false when cfg
// writes no file there.
func FileContents(ctx context.Context, cfg types.Config, path string, src Sources) (data []byte, ok bool, err error) {
	for i, fl := range cfg.Storage.Files {
		if filepath.Clean(fl.Path) != path {
			continue
		}
		if data, err = resolve(ctx, src, fl.Contents); err != nil {
			return nil, true, fmt.Errorf("storage.files[%d] (%s): contents: %w", i, fl.Path, err)
		}
		for j, a := range fl.Append {
			more, err := resolve(ctx, src, a)
			if err != nil {
				return nil, true, fmt.Errorf("storage.files[%d] (%s): append[%d]: %w", i, fl.Path, j, err)
			}
			data = append(data, more...)
		}
		return data, true, nil
	}
	return nil, false, nil
}
