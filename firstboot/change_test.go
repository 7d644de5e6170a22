package firstboot

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/ignition"
)

// identity is what a node file says a node is.
type identity struct{ name, role, address, cluster string }

var w1 = identity{"w1", nodefile.RoleWorker, "10.0.0.21", "kiln"}

// changeConfig is a config as kiln gen renders one (a node file, root's
// SSH key, /etc/motd), with the hashes of the configs it names to fall
// back to, and further storage.files entries. A zero identity writes no
// node file.
func changeConfig(t *testing.T, id identity, key, motd string, fallback []string, files ...string) string {
	t.Helper()
	all := []string{fmt.Sprintf(`{"path":"/etc/motd","overwrite":true,"contents":{"source":"data:,%s"}}`, motd)}
	if id != (identity{}) {
		nf, err := json.Marshal(nodefile.NodeFile{APIVersion: nodefile.APIVersion, Kind: nodefile.Kind, Name: id.name, Role: id.role,
			Address: id.address, Cluster: nodefile.ClusterParams{Name: id.cluster}, FallbackConfigs: fallback})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, fmt.Sprintf(`{"path":%q,"overwrite":true,"contents":{"source":"data:;base64,%s"}}`, nodefile.Path, base64.StdEncoding.EncodeToString(nf)))
	}
	all = append(files, all...) // a failing file first: nothing of the config is applied before it
	return fmt.Sprintf(`{"ignition":{"version":"3.5.0"},"passwd":{"users":[{"name":"root","sshAuthorizedKeys":[%q]}]},"storage":{"files":[%s]}}`,
		key, strings.Join(all, ","))
}

// Files that make a config fail after it parsed.
const (
	// badHash resolves to contents that do not match its hash.
	badHash = `{"path":"/etc/kiln/extra","contents":{"source":"data:,x","verification":{"hash":"sha512-00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"}}}`
	// underAFile is written below /etc/passwd, a file: only applying it
	// fails.
	underAFile = `{"path":"/etc/passwd/x","contents":{"source":"data:,x"}}`
)

const (
	keyOld = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOld old@site"
	keyNew = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINew new@site"
)

// changeNode is a node with its state partition: files under the root
// (the stored config and the rest of the state partition), the pinned
// config in fw_cfg ("" for none) and the kernel command line.
func changeNode(t *testing.T, fwCfg, cmdline string, files map[string]string) (string, *Agent, *bytes.Buffer) {
	t.Helper()
	root := nodeRoot(t, fwCfg)
	// root's uid and gid are the test's own, so its authorized_keys can be
	// given to it without privileges.
	files["/etc/passwd"] = fmt.Sprintf("root:x:%d:%d::/root:/bin/sh\n", os.Getuid(), os.Getgid())
	files["/proc/cmdline"] = "console=ttyS0 " + cmdline + "\n"
	files["/var/lib/kiln-state/kiln-machine.json"] = `{"version":1,"macs":["52:54:00:00:00:01"]}`
	for p, d := range files {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(root, p), []byte(d), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sys := &fakeSys{answers: map[string]answer{"blkid -o device -t LABEL=KILN-STATE": {"/dev/vdb1\n", nil}}}
	var out bytes.Buffer
	return root, &Agent{Root: root, Console: &out, Sys: sys, Machine: fakeMachine{MACs: []string{"52:54:00:00:00:01"}}}, &out
}

func readFile(root, p string) string {
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// A pinned boot whose config is not the stored one changes the node's
// config: the stored config is kept as config.ign.prev, the new one
// stored and applied. A change that would make the node another node
// (or of another cluster) is refused with the fields named, and nothing
// changes; a new config that fails goes back to the stored one only
// when it names it among its fallbackConfigs.
func TestConfigChange(t *testing.T) {
	old := changeConfig(t, w1, keyOld, "old", nil)
	oldHash := ignition.Hash([]byte(old))
	named := []string{"sha512-1111", oldHash} // an older config first, as kiln gen lists them
	const refused = "(a config change may not change a node's name, role, address or cluster: re-image it)"
	tests := []struct {
		name    string
		new     string
		want    string // "" for a plain done source=fw_cfg; "fallback" for a fallback; else the error
		console string // a further console line
	}{
		{"a new SSH key", changeConfig(t, w1, keyNew, "new", named), "", "previous config kept as /var/lib/kiln/config.ign.prev (" + oldHash + ")"},
		{"a new SSH key, no fallback named", changeConfig(t, w1, keyNew, "new", nil), "", ""},
		{"another name", changeConfig(t, identity{"w2", "worker", "10.0.0.21", "kiln"}, keyNew, "new", nil),
			"config change refused: node file name: w1 -> w2 " + refused, ""},
		{"another role", changeConfig(t, identity{"w1", "master", "10.0.0.21", "kiln"}, keyNew, "new", nil),
			"config change refused: node file role: worker -> master " + refused, ""},
		{"another address", changeConfig(t, identity{"w1", "worker", "10.0.0.22", "kiln"}, keyNew, "new", nil),
			"config change refused: node file address: 10.0.0.21 -> 10.0.0.22 " + refused, ""},
		{"to DHCP", changeConfig(t, identity{"w1", "worker", "", "kiln"}, keyNew, "new", nil),
			"config change refused: node file address: 10.0.0.21 -> (none) " + refused, ""},
		{"another cluster", changeConfig(t, identity{"w1", "worker", "10.0.0.21", "other"}, keyNew, "new", nil),
			"config change refused: node file cluster.name: kiln -> other " + refused, ""},
		{"another node of another cluster", changeConfig(t, identity{"m1", "genesis", "10.1.0.11", "other"}, keyNew, "new", nil),
			"config change refused: node file name: w1 -> m1, role: worker -> genesis, address: 10.0.0.21 -> 10.1.0.11, cluster.name: kiln -> other " + refused, ""},
		{"no node file", changeConfig(t, identity{}, keyNew, "new", nil),
			"config change refused: node file /etc/kiln/node.json: the stored config has one, the new one none", ""},
		{"another role, naming the stored config: falls back", changeConfig(t, identity{"w1", "master", "10.0.0.21", "kiln"}, keyNew, "new", named),
			"fallback", "failed: config change refused: node file role: worker -> master " + refused + "; falling back to the previous config " + oldHash + ", which it names"},
		{"a content that does not verify, naming the stored config: falls back", changeConfig(t, w1, keyNew, "new", named, badHash),
			"fallback", "failed: config from fw_cfg: storage.files[0] (/etc/kiln/extra): contents: data:,x: verification failed"},
		{"a content that does not verify", changeConfig(t, w1, keyNew, "new", []string{"sha512-1111"}, badHash),
			"config from fw_cfg: storage.files[0] (/etc/kiln/extra): contents: data:,x: verification failed", ""},
		{"does not parse", `{"ignition":{"version":"3.5.0"},"storage":{"files":[{"path":"relative"}]}}`,
			"invalid config from fw_cfg: ", ""},
		{"fails to apply, naming the stored config: falls back", changeConfig(t, w1, keyNew, "new", named, underAFile),
			"fallback", "previous config restored on the state partition (" + oldHash + ")"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			newHash := ignition.Hash([]byte(tc.new))
			root, a, out := changeNode(t, tc.new, "kiln.config.hash="+newHash, map[string]string{
				"/var/lib/kiln/config.ign":        old,
				"/var/lib/kiln/config.ign.sha512": oldHash + "\n",
			})
			before := snapshot(t, root)
			err := a.Run(context.Background())
			console := out.String()
			got := finalLines(console)
			if tc.console != "" && !strings.Contains(console, tc.console) {
				t.Errorf("the console does not say %q:\n%s", tc.console, console)
			}
			switch tc.want {
			case "":
				if err != nil || len(got) != 1 || got[0] != "kiln-firstboot: done source=fw_cfg" {
					t.Fatalf("final lines %q, %v\n%s", got, err, console)
				}
				for p, want := range map[string]string{
					"/var/lib/kiln/config.ign":             tc.new,
					"/var/lib/kiln/config.ign.sha512":      newHash + "\n",
					"/var/lib/kiln/config.ign.prev":        old,
					"/var/lib/kiln/config.ign.prev.sha512": oldHash + "\n",
					"/root/.ssh/authorized_keys":           keyNew + "\n",
					"/etc/motd":                            "new",
				} {
					if got := readFile(root, p); got != want {
						t.Errorf("%s: %q, want %q", p, got, want)
					}
				}
			case "fallback":
				want := "kiln-firstboot: done source=state fell-back-from=" + newHash
				if err != nil || len(got) != 1 || got[0] != want {
					t.Fatalf("final lines %q, %v; want %q\n%s", got, err, want, console)
				}
				if !strings.Contains(console, "kiln-firstboot: config "+newHash+" failed: ") {
					t.Errorf("the console does not name the failed config:\n%s", console)
				}
				if fb := a.status.FellBack; fb == nil || fb.Failed != newHash || fb.Applied != oldHash {
					t.Errorf("status %+v", a.status.FellBack)
				}
				for p, want := range map[string]string{
					"/var/lib/kiln/config.ign":        old,
					"/var/lib/kiln/config.ign.sha512": oldHash + "\n",
					"/root/.ssh/authorized_keys":      keyOld + "\n",
					"/etc/motd":                       "old",
				} {
					if got := readFile(root, p); got != want {
						t.Errorf("%s: %q, want %q", p, got, want)
					}
				}
				if _, err := os.Stat(filepath.Join(root, inProgressPath)); !os.IsNotExist(err) {
					t.Errorf("in-progress stamp left behind: %v", err)
				}
			default:
				if err == nil || len(got) != 1 || !strings.Contains(got[0], "error: "+tc.want) ||
					!strings.Contains(got[0], oldHash) || !strings.HasSuffix(got[0], "; nothing was changed") {
					t.Fatalf("final lines %q, %v; want one error with %q naming %s\n%s", got, err, tc.want, oldHash, console)
				}
				if !strings.Contains(got[0], newHash) {
					t.Errorf("the error does not name the new config %s: %s", newHash, got[0])
				}
				after := snapshot(t, root)
				delete(after, statusPath)
				if len(after) != len(before) || readFile(root, "/var/lib/kiln/config.ign") != old {
					t.Errorf("files changed: before %v after %v", keys(before), keys(after))
				}
			}
		})
	}
}

// A new config that fails to apply and does not name the stored config
// stops the boot naming both; it stays stored, as any config that
// failed half way does, and the next boot applies it again.
func TestFailedApplyWithoutFallback(t *testing.T) {
	old := changeConfig(t, w1, keyOld, "old", nil)
	cfg := changeConfig(t, w1, keyNew, "new", nil, underAFile)
	oldHash, newHash := ignition.Hash([]byte(old)), ignition.Hash([]byte(cfg))
	root, a, out := changeNode(t, cfg, "kiln.config.hash="+newHash, map[string]string{"/var/lib/kiln/config.ign": old})
	err := a.Run(context.Background())
	got := finalLines(out.String())
	want := "the previous config " + oldHash + " is not one config " + newHash + " names to fall back to, so it is not used"
	if err == nil || len(got) != 1 || !strings.HasPrefix(got[0], "kiln-firstboot: error: files: ") || !strings.HasSuffix(got[0], want) {
		t.Fatalf("final lines %q, want an error ending %q\n%s", got, want, out.String())
	}
	if readFile(root, "/var/lib/kiln/config.ign") != cfg || readFile(root, "/var/lib/kiln/config.ign.prev") != old {
		t.Errorf("stored %q, previous %q", readFile(root, "/var/lib/kiln/config.ign"), readFile(root, "/var/lib/kiln/config.ign.prev"))
	}
	if _, err := os.Stat(filepath.Join(root, inProgressPath)); err != nil {
		t.Errorf("no in-progress stamp after a failed apply: %v", err)
	}
}

// A power cut at any step of a config change leaves the state partition
// in a state the next boot finishes from (the order is in change.go).
func TestConfigChangeAfterAPowerCut(t *testing.T) {
	old := changeConfig(t, w1, keyOld, "old", nil)
	oldHash := ignition.Hash([]byte(old))
	good := changeConfig(t, w1, keyNew, "new", []string{oldHash})
	bad := changeConfig(t, w1, keyNew, "new", []string{oldHash}, underAFile)
	const stamp = "boot b00t-0\n"
	tests := []struct {
		name     string
		fwCfg    string            // the pinned config, served again
		pin      string            // kiln.config.hash=; "" for none
		files    map[string]string // the state partition as the cut left it
		wantLast string            // the final line, after "kiln-firstboot: "
		want     map[string]string // files after the boot
		resumed  bool
	}{
		{"after keeping the previous config", good, good, map[string]string{
			"/var/lib/kiln/config.ign": old, "/var/lib/kiln/config.ign.prev": old},
			"done source=fw_cfg", map[string]string{"/var/lib/kiln/config.ign": good, "/var/lib/kiln/config.ign.prev": old, "/etc/motd": "new"}, false},
		{"after keeping the previous config, booted without the pin", good, "", map[string]string{
			"/var/lib/kiln/config.ign": old, "/var/lib/kiln/config.ign.prev": old},
			"done source=state", map[string]string{"/var/lib/kiln/config.ign": old, "/etc/motd": "old"}, false},
		{"after storing the new config, before its hash", good, good, map[string]string{
			"/var/lib/kiln/config.ign": good, "/var/lib/kiln/config.ign.sha512": oldHash + "\n", "/var/lib/kiln/config.ign.prev": old},
			"done source=state", map[string]string{"/var/lib/kiln/config.ign.sha512": ignition.Hash([]byte(good)) + "\n", "/etc/motd": "new"}, false},
		{"while applying the new config", good, good, map[string]string{
			"/var/lib/kiln/config.ign": good, "/var/lib/kiln/config.ign.prev": old, inProgressPath: stamp},
			"done source=state", map[string]string{"/var/lib/kiln/config.ign": good, "/etc/motd": "new"}, true},
		{"while applying a new config that fails", bad, bad, map[string]string{
			"/var/lib/kiln/config.ign": bad, "/var/lib/kiln/config.ign.prev": old, inProgressPath: stamp},
			"done source=state fell-back-from=" + ignition.Hash([]byte(bad)), map[string]string{"/var/lib/kiln/config.ign": old, "/var/lib/kiln/config.ign.sha512": oldHash + "\n", "/etc/motd": "old"}, true},
		{"while applying a new config that fails, booted without the pin", "", "", map[string]string{
			"/var/lib/kiln/config.ign": bad, "/var/lib/kiln/config.ign.prev": old, inProgressPath: stamp},
			"done source=state fell-back-from=" + ignition.Hash([]byte(bad)), map[string]string{"/var/lib/kiln/config.ign": old, "/etc/motd": "old"}, true},
		{"while falling back, after restoring the previous config", bad, bad, map[string]string{
			"/var/lib/kiln/config.ign": old, "/var/lib/kiln/config.ign.prev": old, inProgressPath: stamp},
			"done source=state fell-back-from=" + ignition.Hash([]byte(bad)), map[string]string{"/var/lib/kiln/config.ign": old, "/etc/motd": "old"}, true},
		{"while falling back, booted without the pin", "", "", map[string]string{
			"/var/lib/kiln/config.ign": old, "/var/lib/kiln/config.ign.prev": old, inProgressPath: stamp},
			"done source=state", map[string]string{"/var/lib/kiln/config.ign": old, "/etc/motd": "old"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := ""
			if tc.pin != "" {
				args = "kiln.config.hash=" + ignition.Hash([]byte(tc.pin))
			}
			root, a, out := changeNode(t, tc.fwCfg, args, tc.files)
			err := a.Run(context.Background())
			got := finalLines(out.String())
			if err != nil || len(got) != 1 || got[0] != "kiln-firstboot: "+tc.wantLast {
				t.Fatalf("final lines %q, %v; want %q\n%s", got, err, tc.wantLast, out.String())
			}
			for p, want := range tc.want {
				if got := readFile(root, p); got != want {
					t.Errorf("%s: %q, want %q", p, got, want)
				}
			}
			if a.status.Resumed != tc.resumed {
				t.Errorf("resumed: %v, want %v", a.status.Resumed, tc.resumed)
			}
			if _, err := os.Stat(filepath.Join(root, inProgressPath)); !os.IsNotExist(err) {
				t.Errorf("in-progress stamp left behind: %v", err)
			}
		})
	}
}
