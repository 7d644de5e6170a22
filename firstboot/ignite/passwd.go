package ignite

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/coreos/ignition/v2/config/v3_5/types"
	"github.com/kiln-project/kiln/internal/atomicfile"
)

// passwd creates or updates groups, then users, with the shadow tools,
// and writes each user's SSH keys.
func (a *Applier) passwd(ctx context.Context, p *Plan) error {
	for _, g := range p.Groups {
		if g.ShouldExist != nil && !*g.ShouldExist {
			continue
		}
		if _, ok := a.lookup("/etc/group", g.Name); ok {
			continue
		}
		args := []string{}
		if g.Gid != nil {
			args = append(args, "-g", strconv.Itoa(*g.Gid))
		}
		if g.System != nil && *g.System {
			args = append(args, "-r")
		}
		if g.PasswordHash != nil {
			args = append(args, "-p", *g.PasswordHash)
		}
		if _, err := a.Host.Run(ctx, "groupadd", append(args, g.Name)...); err != nil {
			return fmt.Errorf("group %s: %w", g.Name, err)
		}
	}
	for _, u := range p.Users {
		if err := a.user(ctx, u); err != nil {
			return fmt.Errorf("user %s: %w", u.Name, err)
		}
	}
	return nil
}

func (a *Applier) user(ctx context.Context, u types.PasswdUser) error {
	if u.ShouldExist != nil && !*u.ShouldExist {
		return nil
	}
	_, exists := a.lookup("/etc/passwd", u.Name)
	args := userArgs(u, exists)
	cmd := "usermod"
	if !exists {
		cmd = "useradd"
	}
	if len(args) > 0 || !exists {
		if _, err := a.Host.Run(ctx, cmd, append(args, u.Name)...); err != nil {
			return err
		}
	}
	if len(u.SSHAuthorizedKeys) == 0 {
		return nil
	}
	return a.sshKeys(u)
}

func userArgs(u types.PasswdUser, exists bool) []string {
	var args []string
	opt := func(flag string, v *string) {
		if v != nil {
			args = append(args, flag, *v)
		}
	}
	if u.UID != nil {
		args = append(args, "-u", strconv.Itoa(*u.UID))
	}
	opt("-c", u.Gecos)
	opt("-d", u.HomeDir)
	opt("-s", u.Shell)
	opt("-p", u.PasswordHash)
	opt("-g", u.PrimaryGroup)
	if len(u.Groups) > 0 {
		gs := make([]string, len(u.Groups))
		for i, g := range u.Groups {
			gs[i] = string(g)
		}
		args = append(args, "-G", strings.Join(gs, ","))
	}
	if exists {
		return args
	}
	if u.NoCreateHome == nil || !*u.NoCreateHome {
		args = append(args, "-m")
	}
	if u.NoUserGroup != nil && *u.NoUserGroup {
		args = append(args, "-N")
	}
	if u.System != nil && *u.System {
		args = append(args, "-r")
	}
	if u.NoLogInit != nil && *u.NoLogInit {
		args = append(args, "-l")
	}
	return args
}

// sshKeys writes ~/.ssh/authorized_keys (0600, owned by the user).
func (a *Applier) sshKeys(u types.PasswdUser) error {
	entry, ok := a.lookup("/etc/passwd", u.Name)
	if !ok {
		return fmt.Errorf("not in /etc/passwd after creation")
	}
	uid, _ := strconv.Atoi(entry[2])
	gid, _ := strconv.Atoi(entry[3])
	home := entry[5]
	var keys strings.Builder
	for _, k := range u.SSHAuthorizedKeys {
		keys.WriteString(strings.TrimSpace(string(k)) + "\n")
	}
	dir := a.path(filepath.Join(home, ".ssh"))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, "authorized_keys"), []byte(keys.String()), 0o600, &atomicfile.Owner{UID: uid, GID: gid})
}

// lookup returns the colon-separated fields of name's line in an
// /etc/passwd-style file under the root.
func (a *Applier) lookup(file, name string) ([]string, bool) {
	f, err := os.Open(a.path(file))
	if err != nil {
		return nil, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) >= 3 && fields[0] == name {
			return fields, true
		}
	}
	return nil, false
}

// owner resolves a node's user and group (by id or name) to numbers;
// nil means root, the agent's own.
func (a *Applier) owner(n Node) (*atomicfile.Owner, error) {
	if n.User.ID == nil && n.User.Name == nil && n.Group.ID == nil && n.Group.Name == nil {
		return nil, nil
	}
	o := &atomicfile.Owner{}
	var err error
	if o.UID, err = a.resolveID("/etc/passwd", n.User.ID, n.User.Name); err != nil {
		return nil, fmt.Errorf("%s: user: %w", n.Path, err)
	}
	if o.GID, err = a.resolveID("/etc/group", n.Group.ID, n.Group.Name); err != nil {
		return nil, fmt.Errorf("%s: group: %w", n.Path, err)
	}
	return o, nil
}

func (a *Applier) resolveID(file string, id *int, name *string) (int, error) {
	switch {
	case id != nil:
		return *id, nil
	case name != nil:
		e, ok := a.lookup(file, *name)
		if !ok {
			return 0, fmt.Errorf("%q not found in %s", *name, file)
		}
		return strconv.Atoi(e[2])
	}
	return 0, nil
}

func (a *Applier) chown(full string, n Node) error {
	o, err := a.owner(n)
	if err != nil || o == nil {
		return err
	}
	return os.Chown(full, o.UID, o.GID)
}

// lchown gives a symbolic link itself the node's owner, as coreos/ignition
// does (SetPermissions, internal/exec/util/file.go). A hard link is the
// target's inode: the spec warns that its owner is not applied.
func (a *Applier) lchown(full string, n Node) error {
	o, err := a.owner(n)
	if err != nil || o == nil {
		return err
	}
	return os.Lchown(full, o.UID, o.GID)
}
