package ignite

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/coreos/ignition/v2/config/v3_5/types"
	"github.com/kiln-project/kiln/internal/command"
	"github.com/kiln-project/kiln/internal/ignition"
)

// A new user gets "*" in /etc/shadow when the config gives no password
// or an empty one, as Ignition passes it to useradd; an existing user's
// password changes only when the config sets one.
func TestUserPasswordIsStarUnlessTheConfigGivesOne(t *testing.T) {
	hash := "$6$salt$hash"
	empty := ""
	tests := []struct {
		name   string
		hash   *string
		exists bool
		want   string // the -p argument; "" for none
	}{
		{"new user, no password", nil, false, "*"},
		{"new user, empty password", &empty, false, "*"},
		{"new user, a hash", &hash, false, hash},
		{"existing user, no password", nil, true, ""},
		{"existing user, empty password", &empty, true, "*"},
		{"existing user, a hash", &hash, true, hash},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := userArgs(types.PasswdUser{Name: "u", PasswordHash: tc.hash}, tc.exists)
			got := ""
			if i := slices.Index(args, "-p"); i >= 0 {
				got = args[i+1]
			}
			if got != tc.want {
				t.Fatalf("args %q: -p %q, want %q", args, got, tc.want)
			}
		})
	}
}

// seedPasswd gives a scratch root an image's users and groups.
func seedPasswd(t *testing.T, root, passwd, group string) {
	t.Helper()
	for name, data := range map[string]string{"etc/passwd": passwd, "etc/group": group} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Users and groups with shouldExist: false are deleted with Ignition's
// commands when the node has them, groups first; /etc starts from the
// image every boot, so a boot after the deletion deletes them again.
func TestDeletionRunsTheShadowToolsEveryBoot(t *testing.T) {
	const (
		passwd = "root:x:0:0::/root:/bin/sh\ngone:x:1500:1500::/nonexistent:/bin/sh\n"
		group  = "root:x:0:\ngone:x:1500:\nold:x:1600:\n"
		cfg    = `{"ignition":{"version":"3.4.0"},"passwd":{
			"users":[{"name":"gone","shouldExist":false},{"name":"never","uid":1700,"shouldExist":false}],
			"groups":[{"name":"old","shouldExist":false},{"name":"never","shouldExist":false}]}}`
	)
	root := newRoot(t)
	want := []string{"groupdel --root " + root + " old", "userdel --remove --root " + root + " gone"}
	for boot, image := range []bool{true, false, true} {
		if image {
			seedPasswd(t, root, passwd, group)
		}
		h, _ := applyConfig(t, root, cfg)
		wantCmds := want
		if !image {
			wantCmds = nil // still deleted: nothing to do
		}
		if !slices.Equal(h.cmds, wantCmds) {
			t.Fatalf("apply %d: commands %q, want %q", boot+1, h.cmds, wantCmds)
		}
		if got := read(t, root, "/etc/passwd") + read(t, root, "/etc/group"); strings.Contains(got, "gone:x:1500:1500") || strings.Contains(got, "old:") {
			t.Fatalf("apply %d: still there:\n%s", boot+1, got)
		}
	}
}

// With the real shadow tools, a deletion edits the four files as
// Ignition's userdel --remove and groupdel do: the user's entries, its
// memberships and its user group go, and so does its home directory.
func TestDeletionWithTheShadowTools(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("the shadow tools need root")
	}
	for _, tool := range []string{"userdel", "groupdel"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s here", tool)
		}
	}
	root := newRoot(t)
	files := map[string]string{
		"etc/passwd":     "root:x:0:0:root:/root:/bin/sh\nirc:x:39:39:ircd:/home/irc:/usr/sbin/nologin\nlist:x:38:38::/var/list:/usr/sbin/nologin\n",
		"etc/shadow":     "root:*:19000:0:99999:7:::\nirc:*:19000:0:99999:7:::\nlist:*:19000:0:99999:7:::\n",
		"etc/group":      "root:x:0:\nfax:x:21:irc,list\nvoice:x:22:\nlist:x:38:\nirc:x:39:\n",
		"etc/gshadow":    "root:*::\nfax:*:irc:irc,list\nvoice:*::\nlist:*::\nirc:*::\n",
		"etc/login.defs": "USERGROUPS_ENAB yes\nMAIL_DIR /var/mail\n",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	home := filepath.Join(root, "home/irc")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".profile"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, 39, 39); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := ignition.Parse([]byte(`{"ignition":{"version":"3.2.0"},"passwd":{
		"users":[{"name":"irc","shouldExist":false},{"name":"cf-absent","shouldExist":false}],
		"groups":[{"name":"voice","shouldExist":false},{"name":"cf-absent","shouldExist":false}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := NewPlan(context.Background(), cfg, Sources{Fetcher: noFetch{}})
	if err != nil {
		t.Fatal(err)
	}
	a := &Applier{Root: root, Persistent: []string{"/var/lib/kiln"}, StampDir: "/var/lib/kiln/stamps", Host: shadowHost{}}
	if err := a.Check(plan); err != nil {
		t.Fatal(err)
	}
	if err := a.Apply(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"/etc/passwd":  "root:x:0:0:root:/root:/bin/sh\nlist:x:38:38::/var/list:/usr/sbin/nologin\n",
		"/etc/shadow":  "root:*:19000:0:99999:7:::\nlist:*:19000:0:99999:7:::\n",
		"/etc/group":   "root:x:0:\nfax:x:21:list\nlist:x:38:\n",
		"/etc/gshadow": "root:*::\nfax:*::list\nlist:*::\n",
	}
	for p, w := range want {
		if got := read(t, root, p); got != w {
			t.Errorf("%s =\n%s\nwant\n%s", p, got, w)
		}
	}
	if _, err := os.Stat(home); !os.IsNotExist(err) {
		t.Errorf("the home directory is still there: %v", err)
	}
}

// What the shadow tools would refuse after editing /etc, and so fail the
// boot half way under Ignition, is refused before anything is written.
func TestCheckRefusesDeletionsTheShadowToolsFailOn(t *testing.T) {
	const passwd = "root:x:0:0::/root:/bin/sh\ntoor:x:0:0::/root:/bin/sh\napp:x:1500:1500::/home/app:/bin/sh\nsvc:x:1501:1600::/nonexistent:/bin/sh\n"
	const group = "root:x:0:\napp:x:1500:\nshared:x:1600:\nspare:x:1700:\n"
	tests := []struct {
		name, passwd string
		setup        func(t *testing.T, root string)
		want         string // "" for accepted
	}{
		{"a group no user has as primary", `"groups":[{"name":"spare","shouldExist":false}]`, nil, ""},
		{"a user and a group the node does not have", `"users":[{"name":"nobody-here","shouldExist":false}],"groups":[{"name":"none","shouldExist":false}]`, nil, ""},
		{"a user whose home does not exist", `"users":[{"name":"svc","shouldExist":false}]`, nil, ""},
		{"a user whose home is its own", `"users":[{"name":"app","shouldExist":false}]`, func(t *testing.T, root string) {
			mkdirOwned(t, filepath.Join(root, "home/app"), 1500)
		}, ""},
		{"a user's own group", `"users":[{"name":"app","shouldExist":false}],"groups":[{"name":"app","shouldExist":false}]`, nil,
			"passwd.groups[0].shouldExist: false: group app is the primary group of user app, and groupdel refuses to delete it (deleting user app alone removes its user group)"},
		{"another user's primary group", `"groups":[{"name":"shared","shouldExist":false}]`, nil,
			"passwd.groups[0].shouldExist: false: group shared is the primary group of user svc, and groupdel refuses to delete it"},
		{"root's group", `"groups":[{"name":"root","shouldExist":false}]`, nil,
			"passwd.groups[0].shouldExist: false: group root is the primary group of user root"},
		{"root by another name", `"users":[{"name":"toor","shouldExist":false}]`, nil,
			"passwd.users[0].shouldExist: false: user toor has uid 0: it is root"},
		{"a home that is not the user's", `"users":[{"name":"app","shouldExist":false}]`, func(t *testing.T, root string) {
			mkdirOwned(t, filepath.Join(root, "home/app"), 0)
		}, "passwd.users[0].shouldExist: false: user app's home directory /home/app is owned by uid 0, not by the user, and userdel --remove (as Ignition runs it) fails on it"},
		{"a mail spool that is not the user's", `"users":[{"name":"svc","shouldExist":false}]`, func(t *testing.T, root string) {
			os.WriteFile(filepath.Join(root, "etc/login.defs"), []byte("# shadow\nMAIL_DIR\t/var/mail\n"), 0o644)
			mkdirOwned(t, filepath.Join(root, "var/mail"), 0)
			os.WriteFile(filepath.Join(root, "var/mail/svc"), nil, 0o600)
		}, "passwd.users[0].shouldExist: false: user svc's mail spool /var/mail/svc is owned by uid 0, not by the user"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil && os.Getuid() != 0 {
				t.Skip("ownership needs root")
			}
			root := newRoot(t)
			seedPasswd(t, root, passwd, group)
			if tc.setup != nil {
				tc.setup(t, root)
			}
			p, err := plan(t, `{"ignition":{"version":"3.4.0"},"passwd":{`+tc.passwd+`}}`)
			if err != nil {
				t.Fatal(err)
			}
			err = (&Applier{Root: root, Persistent: []string{"/var/lib/kiln"}}).Check(p)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v, want %q", err, tc.want)
			}
		})
	}
}

// shadowHost runs the real shadow tools; it sets no hostname.
type shadowHost struct{ command.Host }

func (shadowHost) SetHostname(string) error { return nil }

func mkdirOwned(t *testing.T, dir string, uid int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
}
