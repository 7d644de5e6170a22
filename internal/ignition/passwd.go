package ignition

import (
	"fmt"

	"github.com/coreos/ignition/v2/config/v3_5/types"
)

// deletions lists, each with its field path, the users and groups a
// config deletes (shouldExist: false) and uses too: useradd, or the
// lookup of a file's owner, would fail on a name deleted before it, and
// the node would be left half configured. Deleting root is refused as
// well: kiln's agent and the node's services run as root.
func deletions(c types.Config) []string {
	var p problems
	users, groups := map[string]string{}, map[string]string{}
	for i, g := range c.Passwd.Groups {
		if deleted(g.ShouldExist) {
			groups[g.Name] = fmt.Sprintf("passwd.groups[%d]", i)
		}
	}
	for i, u := range c.Passwd.Users {
		if !deleted(u.ShouldExist) {
			continue
		}
		path := fmt.Sprintf("passwd.users[%d]", i)
		users[u.Name] = path
		if u.Name == "root" {
			p.add(path+".shouldExist", "false would delete root, as whom kiln's agent and the node's services run")
		}
	}
	if len(users)+len(groups) == 0 {
		return nil
	}
	used := func(path, kind, name string, deleting map[string]string) {
		if by, ok := deleting[name]; ok && name != "" {
			p.add(path, "%s %q is deleted by %s (shouldExist: false)", kind, name, by)
		}
	}
	for i, u := range c.Passwd.Users {
		if deleted(u.ShouldExist) {
			continue
		}
		path := fmt.Sprintf("passwd.users[%d]", i)
		if u.PrimaryGroup != nil {
			used(path+".primaryGroup", "group", *u.PrimaryGroup, groups)
		}
		for j, g := range u.Groups {
			used(fmt.Sprintf("%s.groups[%d]", path, j), "group", string(g), groups)
		}
	}
	owner := func(path string, n types.Node) {
		if n.User.Name != nil {
			used(path+".user.name", "user", *n.User.Name, users)
		}
		if n.Group.Name != nil {
			used(path+".group.name", "group", *n.Group.Name, groups)
		}
	}
	for i, f := range c.Storage.Files {
		owner(fmt.Sprintf("storage.files[%d]", i), f.Node)
	}
	for i, d := range c.Storage.Directories {
		owner(fmt.Sprintf("storage.directories[%d]", i), d.Node)
	}
	for i, l := range c.Storage.Links {
		owner(fmt.Sprintf("storage.links[%d]", i), l.Node)
	}
	return p
}

func deleted(shouldExist *bool) bool { return shouldExist != nil && !*shouldExist }
