// Package conformance is kiln's Ignition conformance suite: configs
// written from the Ignition spec (3.0 to 3.5) and from what
// coreos/ignition's blackbox tests check, each with what a node must hold
// once the agent has applied it. The ignite unit tests apply every case
// to a scratch root with fake shadow tools and systemd; the QEMU suite
// merges them into one config, boots the real image with it and runs the
// rendered Script on the node, on the first boot and on the re-apply
// after a power cut.
package conformance

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/url"
	"slices"
	"strings"
)

// The directories the cases write under: one rebuilt from the image on
// every boot, one on the state partition.
const (
	Rebuilt    = "/etc/kiln-conformance"
	Persistent = "/var/lib/kiln/conformance"
)

// The user and groups the cases create, by fixed ids so that ownership
// can be checked by number.
const (
	userName  = "cf-user"
	userID    = 2101
	groupName = "cf-group"
	groupID   = 2100
)

// Case is one behaviour of the spec.
type Case struct {
	Name string
	// Since is the first spec version with every field the case uses.
	Since string
	// Config is the case's config without its ignition section, as JSON.
	Config string
	// Existing are files the image holds before the config is applied
	// (the booted image has them already; unit tests write them).
	Existing map[string]string
	// Nodes are the files, directories and links that must exist after,
	// and the paths that must not.
	Nodes []Node
	// Commands are checks only a booted node can make (users, groups and
	// their shadow entries, units): the command's output must equal Want.
	Commands []Command
}

// Kind is what a path must be.
type Kind string

const (
	File     Kind = "file"
	Dir      Kind = "dir"
	Symlink  Kind = "symlink"
	HardLink Kind = "hardlink" // a regular file sharing Target's inode
	Missing  Kind = "missing"  // nothing at the path
)

// Node is a path the agent must have made.
type Node struct {
	Path     string
	Kind     Kind
	Mode     fs.FileMode // permission bits; zero for links
	Owner    string      // "uid:gid"
	Contents *string     // files and hard links
	Target   string      // a symlink's text, or a hard link's other name
}

// Command is a shell command run on the booted node.
type Command struct {
	Run  string
	Want string
}

// Versions are the spec versions kiln accepts, oldest first.
var Versions = []string{"3.0.0", "3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0"}

func text(s string) *string { return &s }

// dataURL is RFC 2397 percent-encoding, as Ignition's users write it.
func dataURL(s string) string { return "data:," + url.PathEscape(s) }

func base64URL(b []byte) string { return "data:;base64," + base64.StdEncoding.EncodeToString(b) }

func gzipped(s string) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return b.Bytes()
}

func sha512Of(s string) string {
	h := sha512.Sum512([]byte(s))
	return "sha512-" + hex.EncodeToString(h[:])
}

func sha256Of(s string) string {
	h := sha256.Sum256([]byte(s))
	return "sha256-" + hex.EncodeToString(h[:])
}

// js renders a Go value as the JSON of a config; the values are literals
// of this file, so an error is a bug in a case.
func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

type obj = map[string]any

func files(f ...obj) string       { return js(obj{"storage": obj{"files": f}}) }
func directories(d ...obj) string { return js(obj{"storage": obj{"directories": d}}) }
func links(l ...obj) string       { return js(obj{"storage": obj{"links": l}}) }
func units(u ...obj) string       { return js(obj{"systemd": obj{"units": u}}) }

func rootFile(path, contents string, mode fs.FileMode) Node {
	return Node{Path: path, Kind: File, Mode: mode, Owner: "0:0", Contents: text(contents)}
}

// passwd creates the cases' group and user; cases owning paths by name
// carry it, since Ignition creates users before it writes files.
var passwd = obj{
	"groups": []obj{{"name": groupName, "gid": groupID}, {"name": "cf-extra", "gid": groupID + 1}},
	"users": []obj{{
		"name": userName, "uid": userID, "gecos": "kiln conformance", "homeDir": "/home/" + userName,
		"shell": "/bin/sh", "primaryGroup": groupName, "groups": []string{"cf-extra"},
		"sshAuthorizedKeys": []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIConformance cf@test"},
	}},
}

// Cases returns the suite. Every case writes its own paths, so any set of
// them merges into one config.
func Cases() []Case {
	r, p := Rebuilt, Persistent
	special := "special bits\n"
	return []Case{
		{Name: "file: percent-encoded data URL, default mode 0644 and owner root", Since: "3.0.0",
			Config: files(obj{"path": r + "/plain", "contents": obj{"source": dataURL("hello, world\n")}}),
			Nodes:  []Node{rootFile(r+"/plain", "hello, world\n", 0o644)}},
		{Name: "file: base64 data URL with a mode", Since: "3.0.0",
			Config: files(obj{"path": r + "/secret", "mode": 0o600, "contents": obj{"source": base64URL([]byte("s3cr3t"))}}),
			Nodes:  []Node{rootFile(r+"/secret", "s3cr3t", 0o600)}},
		{Name: "file: no contents creates an empty file", Since: "3.0.0",
			Config: files(obj{"path": r + "/empty-nosource"}),
			Nodes:  []Node{rootFile(r+"/empty-nosource", "", 0o644)}},
		{Name: `file: source "" is an empty file`, Since: "3.0.0",
			Config: files(obj{"path": r + "/empty-source", "contents": obj{"source": ""}}),
			Nodes:  []Node{rootFile(r+"/empty-source", "", 0o644)}},
		{Name: "file: missing parent directories are created 0755 root", Since: "3.0.0",
			Config: files(obj{"path": r + "/deep/a/b/file", "contents": obj{"source": dataURL("deep")}}),
			Nodes: []Node{
				{Path: r + "/deep/a", Kind: Dir, Mode: 0o755, Owner: "0:0"},
				rootFile(r+"/deep/a/b/file", "deep", 0o644)}},
		{Name: "directory: missing parents are 0755 root whatever the directory's own mode", Since: "3.0.0",
			Config: directories(obj{"path": r + "/private-parents/a/b", "mode": 0o700}),
			Nodes: []Node{
				{Path: r, Kind: Dir, Mode: 0o755, Owner: "0:0"},
				{Path: r + "/private-parents", Kind: Dir, Mode: 0o755, Owner: "0:0"},
				{Path: r + "/private-parents/a", Kind: Dir, Mode: 0o755, Owner: "0:0"},
				{Path: r + "/private-parents/a/b", Kind: Dir, Mode: 0o700, Owner: "0:0"}}},
		{Name: "file: owner and group by id", Since: "3.0.0",
			Config: files(obj{"path": p + "/owned-by-id", "user": obj{"id": userID}, "group": obj{"id": groupID},
				"contents": obj{"source": dataURL("ids")}}),
			Nodes: []Node{{Path: p + "/owned-by-id", Kind: File, Mode: 0o644, Owner: fmt.Sprintf("%d:%d", userID, groupID), Contents: text("ids")}}},
		{Name: "file: owner and group by name, from users the same config creates", Since: "3.0.0",
			Config: js(obj{"passwd": passwd, "storage": obj{"files": []obj{{"path": r + "/owned-by-name",
				"user": obj{"name": userName}, "group": obj{"name": groupName}, "contents": obj{"source": dataURL("names")}}}}}),
			Nodes: []Node{{Path: r + "/owned-by-name", Kind: File, Mode: 0o644, Owner: fmt.Sprintf("%d:%d", userID, groupID), Contents: text("names")}}},
		{Name: "file: gzip contents are decompressed", Since: "3.0.0",
			Config: files(obj{"path": r + "/gzip", "contents": obj{"compression": "gzip", "source": base64URL(gzipped("was gzipped\n"))}}),
			Nodes:  []Node{rootFile(r+"/gzip", "was gzipped\n", 0o644)}},
		{Name: "file: sha512 verification", Since: "3.0.0",
			Config: files(obj{"path": r + "/sha512", "contents": obj{"source": dataURL("verified"), "verification": obj{"hash": sha512Of("verified")}}}),
			Nodes:  []Node{rootFile(r+"/sha512", "verified", 0o644)}},
		{Name: "file: sha256 verification", Since: "3.1.0",
			Config: files(obj{"path": r + "/sha256", "contents": obj{"source": dataURL("verified"), "verification": obj{"hash": sha256Of("verified")}}}),
			Nodes:  []Node{rootFile(r+"/sha256", "verified", 0o644)}},
		{Name: "file: the hash describes the decompressed data", Since: "3.0.0",
			Config: files(obj{"path": r + "/gzip-hash", "contents": obj{"compression": "gzip", "source": base64URL(gzipped("zipped and verified\n")),
				"verification": obj{"hash": sha512Of("zipped and verified\n")}}}),
			Nodes: []Node{rootFile(r+"/gzip-hash", "zipped and verified\n", 0o644)}},
		{Name: "file: append fragments, plain, gzip and verified, after the contents (persistent path: once)", Since: "3.0.0",
			Config: files(obj{"path": p + "/appended", "contents": obj{"source": dataURL("a\n")}, "append": []obj{
				{"source": dataURL("b\n")},
				{"compression": "gzip", "source": base64URL(gzipped("c\n")), "verification": obj{"hash": sha512Of("c\n")}},
			}}),
			Nodes: []Node{rootFile(p+"/appended", "a\nb\nc\n", 0o644)}},
		{Name: "file: append onto a file the config does not write creates it (rebuilt path: every boot)", Since: "3.0.0",
			Config: files(obj{"path": r + "/append-only", "append": []obj{{"source": dataURL("only\n")}}}),
			Nodes:  []Node{rootFile(r+"/append-only", "only\n", 0o644)}},
		{Name: "file: overwrite true replaces an image file", Since: "3.0.0",
			Existing: map[string]string{"/etc/motd": "the image's motd\n"},
			Config:   files(obj{"path": "/etc/motd", "overwrite": true, "contents": obj{"source": dataURL("kiln conformance motd\n")}}),
			Nodes:    []Node{rootFile("/etc/motd", "kiln conformance motd\n", 0o644)}},
		{Name: "file: setuid, setgid and sticky bits are dropped before spec 3.6, as Ignition does", Since: "3.0.0",
			Config: files(obj{"path": r + "/special", "mode": 0o7755, "contents": obj{"source": dataURL(special)}}),
			Nodes:  []Node{rootFile(r+"/special", special, 0o755)}},
		{Name: "directory: default mode 0755", Since: "3.0.0",
			Config: directories(obj{"path": r + "/dir"}),
			Nodes:  []Node{{Path: r + "/dir", Kind: Dir, Mode: 0o755, Owner: "0:0"}}},
		{Name: "directory: mode, owner and group by id", Since: "3.0.0",
			Config: directories(obj{"path": p + "/dir-owned", "mode": 0o750, "user": obj{"id": userID}, "group": obj{"id": groupID}}),
			Nodes:  []Node{{Path: p + "/dir-owned", Kind: Dir, Mode: 0o750, Owner: fmt.Sprintf("%d:%d", userID, groupID)}}},
		{Name: "directory: overwrite true replaces an image file", Since: "3.0.0",
			Existing: map[string]string{"/etc/issue.net": "Debian GNU/Linux 12\n"},
			Config:   directories(obj{"path": "/etc/issue.net", "overwrite": true}),
			Nodes:    []Node{{Path: "/etc/issue.net", Kind: Dir, Mode: 0o755, Owner: "0:0"}}},
		{Name: "directory: overwrite true replaces an image directory with an empty one", Since: "3.0.0",
			Existing: map[string]string{"/etc/update-motd.d/10-uname": "#!/bin/sh\nuname -snrvm\n"},
			Config:   directories(obj{"path": "/etc/update-motd.d", "overwrite": true, "mode": 0o750}),
			Nodes: []Node{
				{Path: "/etc/update-motd.d", Kind: Dir, Mode: 0o750, Owner: "0:0"},
				{Path: "/etc/update-motd.d/10-uname", Kind: Missing}}},
		{Name: "link: symbolic, absolute target", Since: "3.0.0",
			Config: links(obj{"path": r + "/link-absolute", "target": "/etc/hostname"}),
			Nodes:  []Node{{Path: r + "/link-absolute", Kind: Symlink, Owner: "0:0", Target: "/etc/hostname"}}},
		{Name: "link: symbolic, relative target kept as written", Since: "3.0.0",
			Config: links(obj{"path": r + "/link-relative", "target": "../hostname"}),
			Nodes:  []Node{{Path: r + "/link-relative", Kind: Symlink, Owner: "0:0", Target: "../hostname"}}},
		{Name: "link: symbolic, owner by id, in a directory that does not exist yet", Since: "3.0.0",
			Config: links(obj{"path": r + "/linkdir/link-owned", "target": "/nonexistent", "user": obj{"id": userID}, "group": obj{"id": groupID}}),
			Nodes: []Node{
				{Path: r + "/linkdir", Kind: Dir, Mode: 0o755, Owner: "0:0"},
				{Path: r + "/linkdir/link-owned", Kind: Symlink, Owner: fmt.Sprintf("%d:%d", userID, groupID), Target: "/nonexistent"}}},
		{Name: "link: hard, to a file of the same config, in a directory that does not exist yet", Since: "3.0.0",
			Config: js(obj{"storage": obj{
				"files": []obj{{"path": r + "/hard-target", "contents": obj{"source": dataURL("one inode\n")}}},
				"links": []obj{{"path": r + "/hardlinks/hard", "target": r + "/hard-target", "hard": true}}}}),
			Nodes: []Node{
				rootFile(r+"/hard-target", "one inode\n", 0o644),
				{Path: r + "/hardlinks/hard", Kind: HardLink, Target: r + "/hard-target", Contents: text("one inode\n")}}},
		{Name: "passwd: group with a gid, user with uid, gecos, home, shell, primary and extra groups, SSH key", Since: "3.0.0",
			Config: js(obj{"passwd": passwd}),
			Nodes: []Node{{Path: "/home/" + userName + "/.ssh/authorized_keys", Kind: File, Mode: 0o600,
				Owner: fmt.Sprintf("%d:%d", userID, groupID), Contents: text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIConformance cf@test\n")}},
			Commands: []Command{
				{Run: "getent group " + groupName + " | cut -d: -f3", Want: fmt.Sprint(groupID)},
				{Run: "getent passwd " + userName + " | cut -d: -f3-7", Want: fmt.Sprintf("%d:%d:kiln conformance:/home/%s:/bin/sh", userID, groupID, userName)},
				{Run: "id -nG " + userName, Want: groupName + " cf-extra"},
				{Run: "stat -c %u /home/" + userName, Want: fmt.Sprint(userID)},
			}},
		{Name: "passwd: noCreateHome and system", Since: "3.0.0",
			Config: js(obj{"passwd": obj{"users": []obj{{"name": "cf-system", "system": true, "noCreateHome": true, "homeDir": "/nonexistent-cf"}}}}),
			Commands: []Command{
				{Run: `test "$(id -u cf-system)" -lt 1000 && echo system`, Want: "system"},
				{Run: "test -e /nonexistent-cf && echo home || echo no-home", Want: "no-home"},
			}},
		{Name: `passwd: a new user without a password, or with "", gets "*" in /etc/shadow`, Since: "3.0.0",
			Config: js(obj{"passwd": obj{"users": []obj{
				{"name": "cf-nopass", "noCreateHome": true},
				{"name": "cf-emptypass", "noCreateHome": true, "passwordHash": ""}}}}),
			Commands: []Command{
				{Run: "getent shadow cf-nopass | cut -d: -f2", Want: "*"},
				{Run: "getent shadow cf-emptypass | cut -d: -f2", Want: "*"},
			}},
		// The image's Debian base-passwd has the user irc (uid and gid 39,
		// home /run/ircd, which does not exist) and the group fax.
		{Name: "passwd: shouldExist false deletes an image user, its shadow entry and its user group", Since: "3.2.0",
			Config: js(obj{"passwd": obj{"users": []obj{{"name": "irc", "shouldExist": false}}}}),
			Commands: []Command{
				{Run: "getent passwd irc || echo absent", Want: "absent"},
				{Run: "cat /etc/passwd /etc/shadow /etc/group /etc/gshadow | grep -c '^irc:'", Want: "0"},
			}},
		{Name: "passwd: shouldExist false deletes an image group and its gshadow entry", Since: "3.2.0",
			Config: js(obj{"passwd": obj{"groups": []obj{{"name": "fax", "shouldExist": false}}}}),
			Commands: []Command{
				{Run: "getent group fax || echo absent", Want: "absent"},
				{Run: "cat /etc/group /etc/gshadow | grep -c '^fax:'", Want: "0"},
			}},
		{Name: "passwd: shouldExist false for a user and group the node does not have changes nothing", Since: "3.2.0",
			Config: js(obj{"passwd": obj{
				"users":  []obj{{"name": "cf-absent", "uid": 2199, "shouldExist": false}},
				"groups": []obj{{"name": "cf-absent", "gid": 2199, "shouldExist": false}}}}),
			Commands: []Command{{Run: "cat /etc/passwd /etc/group | grep -c '^cf-absent:'", Want: "0"}}},
		{Name: "systemd: unit with a drop-in, enabled and started in this boot", Since: "3.0.0",
			Config: units(obj{"name": "cf-marker.service", "enabled": true,
				"contents": "[Unit]\nDescription=kiln conformance marker\n[Service]\nType=oneshot\nExecStart=/bin/sh -c 'echo \"$CF\" > /run/kiln-conformance-marker'\n[Install]\nWantedBy=multi-user.target\n",
				"dropins":  []obj{{"name": "10-env.conf", "contents": "[Service]\nEnvironment=CF=from-the-drop-in\n"}}}),
			Nodes: []Node{rootFile("/etc/systemd/system/cf-marker.service.d/10-env.conf", "[Service]\nEnvironment=CF=from-the-drop-in\n", 0o644)},
			Commands: []Command{
				{Run: "systemctl is-enabled cf-marker.service", Want: "enabled"},
				{Run: "cat /run/kiln-conformance-marker", Want: "from-the-drop-in"},
			}},
		{Name: "systemd: enabled false leaves a unit disabled", Since: "3.0.0",
			Config: units(obj{"name": "cf-disabled.service", "enabled": false,
				"contents": "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"}),
			Commands: []Command{{Run: "systemctl is-enabled cf-disabled.service", Want: "disabled"}}},
		{Name: "systemd: mask", Since: "3.0.0",
			Config:   units(obj{"name": "cf-masked.service", "mask": true}),
			Nodes:    []Node{{Path: "/etc/systemd/system/cf-masked.service", Kind: Symlink, Owner: "0:0", Target: "/dev/null"}},
			Commands: []Command{{Run: "systemctl is-enabled cf-masked.service", Want: "masked"}}},
		{Name: `systemd: a unit with contents "" is not written, its empty drop-in is`, Since: "3.0.0",
			Config: units(obj{"name": "cf-empty.service", "contents": "", "dropins": []obj{{"name": "10-empty.conf", "contents": ""}}}),
			Nodes: []Node{
				{Path: "/etc/systemd/system/cf-empty.service", Kind: Missing},
				rootFile("/etc/systemd/system/cf-empty.service.d/10-empty.conf", "", 0o644)}},
		{Name: "systemd: a drop-in for an image unit, without contents", Since: "3.0.0",
			Config:   units(obj{"name": "fstrim.service", "dropins": []obj{{"name": "10-cf.conf", "contents": "[Unit]\nDescription=kiln conformance drop-in\n"}}}),
			Nodes:    []Node{rootFile("/etc/systemd/system/fstrim.service.d/10-cf.conf", "[Unit]\nDescription=kiln conformance drop-in\n", 0o644)},
			Commands: []Command{{Run: "systemctl show -P Description fstrim.service", Want: "kiln conformance drop-in"}}},
	}
}

// Upto returns the cases whose fields spec version has.
func Upto(version string, cases []Case) []Case {
	limit := slices.Index(Versions, version)
	var out []Case
	for _, c := range cases {
		if i := slices.Index(Versions, c.Since); i >= 0 && i <= limit {
			out = append(out, c)
		}
	}
	return out
}

// Config renders cases as one config of spec version: their lists are
// concatenated, and the passwd entries several cases share appear once.
func Config(version string, cases []Case) ([]byte, error) {
	merged := obj{}
	seen := map[string]bool{}
	for _, c := range cases {
		var body obj
		if err := json.Unmarshal([]byte(c.Config), &body); err != nil {
			return nil, fmt.Errorf("case %q: %w", c.Name, err)
		}
		for section, v := range body {
			fields, _ := v.(map[string]any)
			dst, _ := merged[section].(obj)
			if dst == nil {
				dst = obj{}
				merged[section] = dst
			}
			for field, list := range fields {
				items, _ := list.([]any)
				for _, it := range items {
					key := section + "." + field + ":" + js(it)
					if seen[key] {
						continue
					}
					seen[key] = true
					have, _ := dst[field].([]any)
					dst[field] = append(have, it)
				}
			}
		}
	}
	merged["ignition"] = obj{"version": version}
	return json.MarshalIndent(merged, "", "  ")
}

// DoneLine starts the line Script prints last.
const DoneLine = "kiln-conformance: done"

// Script renders every check of cases as a POSIX shell script that prints
// one "kiln-conformance: FAIL" line per failed check and ends with
// DoneLine, the number of checks and of failures.
func Script(cases []Case) string {
	var b strings.Builder
	b.WriteString(`#!/bin/sh
# kiln's Ignition conformance checks, rendered by firstboot/ignite/conformance.
n=0; failed=0
check() { # name want got
	n=$((n+1))
	[ "$2" = "$3" ] || { failed=$((failed+1)); echo "kiln-conformance: FAIL $1: want '$2', got '$3'"; }
}
kind() {
	if [ -L "$1" ]; then echo symlink; elif [ -d "$1" ]; then echo dir; elif [ -f "$1" ]; then echo file; else echo missing; fi
}
sum() { sha256sum < "$1" 2>/dev/null | cut -d' ' -f1; }
`)
	for _, c := range cases {
		fmt.Fprintf(&b, "\n# %s\n", c.Name)
		for _, n := range c.Nodes {
			name := func(what string) string { return quote(c.Name + ": " + n.Path + " " + what) }
			p := quote(n.Path)
			kind := n.Kind
			if kind == HardLink {
				kind = File
			}
			fmt.Fprintf(&b, "check %s %s \"$(kind %s)\"\n", name("kind"), kind, p)
			if n.Mode != 0 {
				fmt.Fprintf(&b, "check %s %o \"$(stat -c %%a %s)\"\n", name("mode"), n.Mode.Perm(), p)
			}
			if n.Owner != "" {
				fmt.Fprintf(&b, "check %s %s \"$(stat -c %%u:%%g %s)\"\n", name("owner"), n.Owner, p)
			}
			if n.Contents != nil {
				h := sha256.Sum256([]byte(*n.Contents))
				fmt.Fprintf(&b, "check %s %s \"$(sum %s)\"\n", name("contents (sha256)"), hex.EncodeToString(h[:]), p)
			}
			switch n.Kind {
			case Symlink:
				fmt.Fprintf(&b, "check %s %s \"$(readlink %s)\"\n", name("target"), quote(n.Target), p)
			case HardLink:
				fmt.Fprintf(&b, "check %s \"$(stat -c %%i %s)\" \"$(stat -c %%i %s)\"\n", name("inode"), quote(n.Target), p)
			}
		}
		for _, cmd := range c.Commands {
			fmt.Fprintf(&b, "check %s %s \"$(%s 2>&1)\"\n", quote(c.Name+": "+cmd.Run), quote(cmd.Want), cmd.Run)
		}
	}
	b.WriteString("\necho \"" + DoneLine + " checks=$n failed=$failed\"\n")
	return b.String()
}

// quote makes s one single-quoted shell word.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
