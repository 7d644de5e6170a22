package ignite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/coreos/ignition/v2/config/v3_5/types"
	"github.com/kiln-project/kiln/internal/atomicfile"
)

// passwd applies groups, then users, with the shadow tools, as Ignition
// does: a group or user with shouldExist: false is deleted if the node
// has it; any other group is created if missing, any other user created
// or updated, and its SSH keys written. The node's /etc starts from the
// image every boot, so the deletions happen again on every boot.
func (a *Applier) passwd(ctx context.Context, p *Plan) error {
	for _, g := range p.Groups {
		if err := a.group(ctx, g); err != nil {
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

func (a *Applier) group(ctx context.Context, g types.PasswdGroup) error {
	_, exists := a.lookup("/etc/group", g.Name)
	if deleted(g.ShouldExist) {
		if !exists {
			return nil
		}
		a.logf("deleting group %s", g.Name)
		_, err := a.Host.Run(ctx, "groupdel", "--root", a.Root, g.Name)
		return err
	}
	if exists {
		return nil
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
	_, err := a.Host.Run(ctx, "groupadd", append(args, g.Name)...)
	return err
}

func (a *Applier) user(ctx context.Context, u types.PasswdUser) error {
	_, exists := a.lookup("/etc/passwd", u.Name)
	if deleted(u.ShouldExist) {
		if !exists {
			return nil
		}
		// Ignition's flags: --remove takes the home directory and mail
		// spool with the user, and --root spares the check for the user's
		// processes, which Ignition, in the initramfs, never meets.
		a.logf("deleting user %s", u.Name)
		_, err := a.Host.Run(ctx, "userdel", "--remove", "--root", a.Root, u.Name)
		return err
	}
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

func deleted(shouldExist *bool) bool { return shouldExist != nil && !*shouldExist }

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
	// A user created without a password, and any user given an empty
	// one, gets "*" (no password login), as Ignition passes it; useradd
	// alone would write "!".
	switch {
	case u.PasswordHash != nil && *u.PasswordHash != "":
		args = append(args, "-p", *u.PasswordHash)
	case u.PasswordHash != nil || !exists:
		args = append(args, "-p", "*")
	}
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

// checkDeletions finds, before anything is written, the deletions the
// shadow tools would refuse part way, as they would under Ignition.
// groupdel refuses a user's primary group; groups go before users, so
// that holds even when the config deletes that user too (deleting the
// user takes its own user group with it). userdel --remove edits /etc,
// then fails on a home directory or mail spool that is not the user's.
// A user with uid 0 is root by another name.
func (a *Applier) checkDeletions(p *Plan) []string {
	var problems []string
	add := func(field string, i int, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("passwd.%s[%d].shouldExist: false: ", field, i)+fmt.Sprintf(format, args...))
	}
	for i, g := range p.Groups {
		entry, ok := a.lookup("/etc/group", g.Name)
		if !deleted(g.ShouldExist) || !ok {
			continue
		}
		for _, user := range a.entries("/etc/passwd") {
			if len(user) >= 4 && user[3] == entry[2] {
				hint := ""
				if user[0] == g.Name {
					hint = fmt.Sprintf(" (deleting user %s alone removes its user group)", user[0])
				}
				add("groups", i, "group %s is the primary group of user %s, and groupdel refuses to delete it%s", g.Name, user[0], hint)
				break
			}
		}
	}
	mailDir := a.loginDef("MAIL_DIR")
	for i, u := range p.Users {
		entry, ok := a.lookup("/etc/passwd", u.Name)
		if !deleted(u.ShouldExist) || !ok {
			continue
		}
		if entry[2] == "0" {
			add("users", i, "user %s has uid 0: it is root", u.Name)
			continue
		}
		uid, err := strconv.Atoi(entry[2])
		if err != nil || len(entry) < 6 {
			add("users", i, "user %s has a malformed /etc/passwd entry", u.Name)
			continue
		}
		owned := []struct{ what, path string }{{"home directory", entry[5]}}
		if mailDir != "" {
			owned = append(owned, struct{ what, path string }{"mail spool", filepath.Join(mailDir, u.Name)})
		}
		for _, o := range owned {
			if o.path == "" {
				continue
			}
			var st syscall.Stat_t
			err := syscall.Stat(a.path(o.path), &st)
			switch {
			case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
			case err != nil:
				add("users", i, "user %s's %s %s: %v", u.Name, o.what, o.path, err)
			case int(st.Uid) != uid:
				add("users", i, "user %s's %s %s is owned by uid %d, not by the user, and userdel --remove (as Ignition runs it) fails on it", u.Name, o.what, o.path, st.Uid)
			}
		}
	}
	return problems
}

// entries returns the colon-separated fields of every line of an
// /etc/passwd-style file under the root.
func (a *Applier) entries(file string) [][]string {
	data, err := os.ReadFile(a.path(file))
	if err != nil {
		return nil
	}
	var out [][]string
	for _, line := range strings.Split(string(data), "\n") {
		if line != "" {
			out = append(out, strings.Split(line, ":"))
		}
	}
	return out
}

// loginDef returns a setting of the root's /etc/login.defs, which the
// shadow tools read; "" when it is not set.
func (a *Applier) loginDef(key string) string {
	data, err := os.ReadFile(a.path("/etc/login.defs"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == key {
			return f[1]
		}
	}
	return ""
}
