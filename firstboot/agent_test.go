package firstboot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/firstboot/machine"
	"github.com/kiln-project/kiln/internal/ignition"
)

// fakeSys answers every disk tool with "nothing found", like a diskless
// node booted from CD or PXE, unless answers has the command line.
type fakeSys struct {
	cmds    []string
	answers map[string]answer
	// fails makes a command line fail this many times before it answers.
	fails map[string]int
}

type answer struct {
	out string
	err error
}

// exitStatus is a command that ran and failed, as exec reports it.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
func (e exitStatus) ExitCode() int { return int(e) }

func (f *fakeSys) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	line := name + " " + strings.Join(args, " ")
	f.cmds = append(f.cmds, line)
	if f.fails[line] > 0 {
		f.fails[line]--
		return nil, exitStatus(1)
	}
	if a, ok := f.answers[line]; ok {
		return []byte(a.out), a.err
	}
	return nil, nil
}
func (f *fakeSys) SetHostname(string) error { return nil }

func nodeRoot(t *testing.T, fwCfg string) string {
	root := t.TempDir()
	files := map[string]string{
		"/proc/sys/kernel/random/boot_id": "b00t-1\n",
		"/proc/cmdline":                   "console=ttyS0\n",
		"/etc/passwd":                     "root:x:0:0::/root:/bin/sh\n",
		"/etc/group":                      "root:x:0:\n",
	}
	if fwCfg != "" {
		files["/sys/firmware/qemu_fw_cfg/by_name/opt/com.coreos/config/raw"] = fwCfg
	}
	for p, d := range files {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(root, p), []byte(d), 0o644)
	}
	return root
}

func runAgent(t *testing.T, root string) (string, error, Status) {
	var out bytes.Buffer
	a := &Agent{Root: root, Console: &out, Sys: &fakeSys{}}
	err := a.Run(context.Background())
	var st Status
	data, rerr := os.ReadFile(filepath.Join(root, statusPath))
	if rerr != nil {
		t.Fatal(rerr)
	}
	if jerr := json.Unmarshal(data, &st); jerr != nil {
		t.Fatal(jerr)
	}
	return out.String(), err, st
}

func finalLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "kiln-firstboot: done") || strings.HasPrefix(l, "kiln-firstboot: error") {
			lines = append(lines, l)
		}
	}
	return lines
}

func TestDisklessNodeAppliesFwCfgConfigAndSaysDoneOnce(t *testing.T) {
	root := nodeRoot(t, `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/motd","contents":{"source":"data:,hello"}}]}}`)
	out, err, st := runAgent(t, root)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := finalLines(out); len(got) != 1 || got[0] != "kiln-firstboot: done source=fw_cfg" {
		t.Fatalf("final lines %q, want exactly one done line\n%s", got, out)
	}
	if !strings.HasPrefix(out, "kiln-firstboot: start boot_id=b00t-1\n") {
		t.Errorf("first line is not the start line:\n%s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/motd")); string(b) != "hello" {
		t.Errorf("/etc/motd = %q", b)
	}
	if st.State != "done" || st.Source != "fw_cfg" || !st.FirstBoot || st.BootID != "b00t-1" {
		t.Errorf("status %+v", st)
	}
	if _, err := os.Stat(filepath.Join(root, firstBootFlag)); err != nil {
		t.Errorf("%s missing on a diskless node's boot: %v", firstBootFlag, err)
	}
	if _, err := os.Stat(filepath.Join(root, inProgressPath)); !os.IsNotExist(err) {
		t.Errorf("in-progress stamp left behind: %v", err)
	}
}

func TestInvalidConfigPrintsReportAndChangesNothing(t *testing.T) {
	root := nodeRoot(t, `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/motd","contents":{"source":"data:,x"}},{"path":"relative"}]}}`)
	before := snapshot(t, root)
	out, err, st := runAgent(t, root)
	if err == nil {
		t.Fatal("invalid config was applied")
	}
	got := finalLines(out)
	if len(got) != 1 || !strings.HasPrefix(got[0], "kiln-firstboot: error: invalid config from fw_cfg") {
		t.Fatalf("final lines %q\n%s", got, out)
	}
	if !strings.Contains(out, "kiln-firstboot: config: ") || !strings.Contains(out, "storage.files.1.path") {
		t.Errorf("the report with the field path is not on the console:\n%s", out)
	}
	if st.State != "error" || len(st.Report) == 0 {
		t.Errorf("status %+v", st)
	}
	after := snapshot(t, root)
	delete(after, statusPath)
	if len(after) != len(before) {
		t.Errorf("files changed by an invalid config: before %v after %v", keys(before), keys(after))
	}
}

func TestNoConfigWithoutWaitingIsAnError(t *testing.T) {
	out, err, st := runAgent(t, nodeRoot(t, ""))
	if err == nil || st.State != "error" || !strings.Contains(out, "kiln-firstboot: error: no config found") {
		t.Fatalf("err=%v state=%s\n%s", err, st.State, out)
	}
}

func snapshot(t *testing.T, root string) map[string]bool {
	m := map[string]bool{}
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			rel, _ := filepath.Rel(root, p)
			m["/"+rel] = true
		}
		return nil
	})
	return m
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// networkd configured the links before the config arrived: a config that
// writes .network files gets them applied; one that does not, no reload.
func TestNetworkFilesReloadNetworkd(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		reload     bool
	}{
		{"network file", "/etc/systemd/network/10-kiln.network", true},
		{"other file", "/etc/motd", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := nodeRoot(t, `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"`+tc.path+`","contents":{"source":"data:,x"}}]}}`)
			sys := &fakeSys{}
			var out bytes.Buffer
			if err := (&Agent{Root: root, Console: &out, Sys: sys}).Run(context.Background()); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			got := false
			for _, c := range sys.cmds {
				got = got || c == "networkctl reload"
			}
			if got != tc.reload {
				t.Errorf("networkctl reload run: %v, want %v (commands %v)", got, tc.reload, sys.cmds)
			}
		})
	}
}

// networkctl asks networkd over D-Bus, which has timed out on a loaded
// machine: the agent tries again, then restarts networkd, and fails only
// when that fails too, naming every attempt.
func TestNetworkReloadIsRetriedThenRestarts(t *testing.T) {
	const reload, restart = "networkctl reload", "systemctl restart systemd-networkd.service"
	for _, tc := range []struct {
		name      string
		fails     map[string]int
		wantCmds  []string
		wantErr   string
		wantSteps string
	}{
		{"second attempt works", map[string]int{reload: 1}, []string{reload, reload}, "", "network configuration reloaded"},
		{"restart", map[string]int{reload: 3}, []string{reload, reload, reload, restart}, "", "restarting systemd-networkd (networkctl reload failed 3 times)"},
		{"restart fails", map[string]int{reload: 3, restart: 1}, []string{reload, reload, reload, restart}, "restart: exit status 1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := nodeRoot(t, `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/systemd/network/10-kiln.network","contents":{"source":"data:,x"}}]}}`)
			sys := &fakeSys{fails: tc.fails}
			var out bytes.Buffer
			err := (&Agent{Root: root, Console: &out, Sys: sys, ReloadPause: time.Millisecond}).Run(context.Background())
			var got []string
			for _, c := range sys.cmds {
				if c == reload || c == restart {
					got = append(got, c)
				}
			}
			if !slices.Equal(got, tc.wantCmds) {
				t.Errorf("commands %q, want %q", got, tc.wantCmds)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "reload attempt 3: exit status 1") {
					t.Fatalf("error %v, want one naming the reloads and %q", err, tc.wantErr)
				}
				if strings.Contains(out.String(), "kiln-firstboot: done") {
					t.Errorf("the agent reported done:\n%s", out.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), tc.wantSteps) {
				t.Errorf("console lacks %q:\n%s", tc.wantSteps, out.String())
			}
		})
	}
}

// The agent never guesses about a disk: a lookup or probe that fails stops
// it with a line naming what it could not read, before any disk tool
// writes and before the config is applied.
func TestFailedDiskProbeStopsTheAgent(t *testing.T) {
	tests := []struct {
		name    string
		answers map[string]answer
		want    string
	}{
		{"state lookup fails", map[string]answer{"blkid -o device -t LABEL=KILN-STATE": {"", exitStatus(4)}}, "KILN-STATE"},
		{"boot disk probe fails", map[string]answer{"blkid -p -o value -s PTTYPE /dev/vda": {"", exitStatus(8)}}, "/dev/vda"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := nodeRoot(t, `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/motd","contents":{"source":"data:,hello"}}]}}`)
			for _, p := range []string{"/dev/vda", "/dev/disk/by-partlabel/KILN-ROOT-A"} {
				os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
				os.WriteFile(filepath.Join(root, p), nil, 0o644)
			}
			tc.answers["lsblk -ndo PKNAME "+filepath.Join(root, "/dev/disk/by-partlabel/KILN-ROOT-A")] = answer{"vda\n", nil}
			sys := &fakeSys{answers: tc.answers}
			var out bytes.Buffer
			err := (&Agent{Root: root, Console: &out, Sys: sys}).Run(context.Background())
			got := finalLines(out.String())
			if err == nil || len(got) != 1 || !strings.HasPrefix(got[0], "kiln-firstboot: error: ") || !strings.Contains(got[0], tc.want) {
				t.Fatalf("final lines %q, want one error naming %s\n%s", got, tc.want, out.String())
			}
			for _, c := range sys.cmds {
				if strings.HasPrefix(c, "sgdisk") || strings.HasPrefix(c, "mkfs") || strings.HasPrefix(c, "wipefs") {
					t.Errorf("%q ran after a failed probe", c)
				}
			}
			if _, err := os.Stat(filepath.Join(root, "etc/motd")); !os.IsNotExist(err) {
				t.Errorf("the config was applied: /etc/motd %v", err)
			}
		})
	}
}

// Storage kiln does not set up is rejected before anything is written:
// the console names the field, and no disk tool runs.
func TestUnappliedStorageIsRejectedBeforeAnyWrite(t *testing.T) {
	const file = `{"path":"/etc/motd","contents":{"source":"data:,x"}}`
	tests := []struct{ name, storage, want string }{
		{"another filesystem", `"filesystems":[{"device":"/dev/sdb1","format":"xfs","path":"/data","wipeFilesystem":true}]`,
			"storage.filesystems[0] (/dev/sdb1): filesystems other than the state partition"},
		{"a partition on another disk", `"disks":[{"device":"/dev/sdb","wipeTable":true,"partitions":[{"label":"data"}]}]`,
			"storage.disks[0] (/dev/sdb): only the disk holding the KILN-STATE partition"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := nodeRoot(t, `{"ignition":{"version":"3.4.0"},"storage":{"files":[`+file+`],`+tc.storage+`}}`)
			before := snapshot(t, root)
			sys := &fakeSys{}
			var out bytes.Buffer
			err := (&Agent{Root: root, Console: &out, Sys: sys}).Run(context.Background())
			got := finalLines(out.String())
			if err == nil || len(got) != 1 || !strings.Contains(got[0], "invalid config from fw_cfg: "+tc.want) {
				t.Fatalf("final lines %q, want one error naming %s\n%s", got, tc.want, out.String())
			}
			if !strings.Contains(out.String(), "kiln-firstboot: config: "+tc.want) {
				t.Errorf("the report line is not on the console:\n%s", out.String())
			}
			for _, c := range sys.cmds {
				if strings.HasPrefix(c, "sgdisk") || strings.HasPrefix(c, "mkfs") || strings.HasPrefix(c, "wipefs") || strings.HasPrefix(c, "mount") {
					t.Errorf("%q ran for a rejected config", c)
				}
			}
			after := snapshot(t, root)
			delete(after, statusPath)
			if len(after) != len(before) {
				t.Errorf("files changed by a rejected config: before %v after %v", keys(before), keys(after))
			}
		})
	}
}

// A config fetched over plain http is applied only when kiln.config.hash=
// pins it or the image allows unverified configs; otherwise the console
// says why and nothing changes.
func TestPlainHTTPConfigNeedsAHash(t *testing.T) {
	const cfg = `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/motd","contents":{"source":"data:,hello"}}]}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(cfg)) }))
	defer srv.Close()
	tests := []struct {
		name     string
		args     string
		settings string // /usr/lib/kiln/agent.json; "" for none
		wantErr  string // "" when the config is applied
	}{
		{"no hash", "", "", "refusing the config from " + srv.URL + "/node.ign: nothing verifies it"},
		{"its hash", "kiln.config.hash=" + ignition.Hash([]byte(cfg)), "", ""},
		{"another node's hash", "kiln.config.hash=" + ignition.Hash([]byte("{}")), "", "verification failed"},
		{"no hash, the image allows it", "", `{"allowUnverifiedConfig": true}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := nodeRoot(t, "")
			os.WriteFile(filepath.Join(root, "/proc/cmdline"), []byte("console=ttyS0 ignition.config.url="+srv.URL+"/node.ign "+tc.args+"\n"), 0o644)
			if tc.settings != "" {
				os.MkdirAll(filepath.Join(root, "/usr/lib/kiln"), 0o755)
				os.WriteFile(filepath.Join(root, "/usr/lib/kiln/agent.json"), []byte(tc.settings), 0o644)
			}
			before := snapshot(t, root)
			out, err, st := runAgent(t, root)
			got := finalLines(out)
			if tc.wantErr == "" {
				if err != nil || len(got) != 1 || got[0] != "kiln-firstboot: done source=url" {
					t.Fatalf("final lines %q, %v\n%s", got, err, out)
				}
				return
			}
			if err == nil || len(got) != 1 || !strings.Contains(got[0], "error: config source url: ") || !strings.Contains(got[0], tc.wantErr) {
				t.Fatalf("final lines %q, want one error containing %q\n%s", got, tc.wantErr, out)
			}
			if st.State != "error" {
				t.Errorf("status %+v", st)
			}
			after := snapshot(t, root)
			delete(after, statusPath)
			if len(after) != len(before) {
				t.Errorf("files changed by a refused config: before %v after %v", keys(before), keys(after))
			}
		})
	}
}

type fakeMachine machine.ID

func (f fakeMachine) Identity() (machine.ID, error) { return machine.ID(f), nil }

// A state partition is used only by the machine that made it: one from
// another machine (a moved disk, a stick labelled KILN-STATE) is left
// unmounted, its config unread, nothing created or formatted, and the
// node takes its config from the other sources with state in RAM.
func TestStatePartitionBelongsToOneMachine(t *testing.T) {
	const (
		stored = `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/motd","contents":{"source":"data:,stored"}}]}}`
		fwCfg  = `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/motd","contents":{"source":"data:,fwcfg"}}]}}`
		this   = `{"version":1,"productUUID":"4c4c4544-0042-3510-8051-b4c04f4e3132","macs":["52:54:00:00:00:01"]}`
		other  = `{"version":1,"productUUID":"4c4c4544-0000-0000-0000-000000000002","macs":["52:54:00:00:00:02"]}`
	)
	me := fakeMachine{ProductUUID: "4c4c4544-0042-3510-8051-b4c04f4e3132", MACs: []string{"52:54:00:00:00:01"}}
	tests := []struct {
		name       string
		record     string // the state filesystem's kiln-machine.json; "" for none
		args       string // on the kernel command line
		wantSource string
		wantMotd   string
		wantLine   string
		foreign    bool
	}{
		{"this machine's", this, "", "state", "stored", "state partition /dev/vdb1 mounted", false},
		{"without a record: not adopted unless asked", "", "", "fw_cfg", "fwcfg",
			"the KILN-STATE filesystem on /dev/vdb1 has no kiln-machine.json: nothing says it is this machine's: not using it, nor its config (if this machine made it with an earlier kiln, boot once with kiln.state.adopt=1 to adopt it", true},
		{"without a record, kiln.state.adopt=1: adopted", "", "kiln.state.adopt=1", "state", "stored",
			"state partition /dev/vdb1 has no record of its machine: adopting it for this machine, as kiln.state.adopt=1 asks", false},
		{"without a record, kiln.state.adopt=yes: only 1 asks", "", "kiln.state.adopt=yes", "fw_cfg", "fwcfg", "the KILN-STATE filesystem on /dev/vdb1 has no kiln-machine.json", true},
		{"another machine's", other, "", "fw_cfg", "fwcfg", "the KILN-STATE filesystem on /dev/vdb1 is not this machine's: it was made by the machine with product UUID 4c4c4544-0000-0000-0000-000000000002", true},
		{"another machine's, kiln.state.adopt=1: a record is not overridden", other, "kiln.state.adopt=1", "fw_cfg", "fwcfg", "the KILN-STATE filesystem on /dev/vdb1 is not this machine's: it was made by the machine with product UUID 4c4c4544-0000-0000-0000-000000000002", true},
		{"a record that does not parse", "{", "", "fw_cfg", "fwcfg", "the KILN-STATE filesystem on /dev/vdb1 is not this machine's: its kiln-machine.json does not parse", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := nodeRoot(t, fwCfg)
			os.WriteFile(filepath.Join(root, "/proc/cmdline"), []byte("console=ttyS0 "+tc.args+"\n"), 0o644)
			files := map[string]string{"/var/lib/kiln/config.ign": stored}
			if tc.record != "" {
				files["/var/lib/kiln-state/kiln-machine.json"] = tc.record
			}
			for p, d := range files {
				os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
				os.WriteFile(filepath.Join(root, p), []byte(d), 0o600)
			}
			sys := &fakeSys{answers: map[string]answer{"blkid -o device -t LABEL=KILN-STATE": {"/dev/vdb1\n", nil}}}
			var out bytes.Buffer
			a := &Agent{Root: root, Console: &out, Sys: sys, Machine: me}
			if err := a.Run(context.Background()); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if got := finalLines(out.String()); len(got) != 1 || got[0] != "kiln-firstboot: done source="+tc.wantSource {
				t.Fatalf("final lines %q, want done source=%s\n%s", got, tc.wantSource, out.String())
			}
			if !strings.Contains(out.String(), "kiln-firstboot: "+tc.wantLine) {
				t.Errorf("the console does not say %q:\n%s", tc.wantLine, out.String())
			}
			if b, _ := os.ReadFile(filepath.Join(root, "etc/motd")); string(b) != tc.wantMotd {
				t.Errorf("/etc/motd = %q, want %q", b, tc.wantMotd)
			}
			rec, _ := os.ReadFile(filepath.Join(root, "/var/lib/kiln-state/kiln-machine.json"))
			switch {
			case tc.record == "" && !tc.foreign:
				if !strings.Contains(string(rec), `"productUUID": "4c4c4544-0042-3510-8051-b4c04f4e3132"`) {
					t.Errorf("the adopted partition's record: %s", rec)
				}
			case string(rec) != tc.record:
				t.Errorf("the record changed: %q, was %q", rec, tc.record)
			}
			var binds, umounts, remounts int
			for _, c := range sys.cmds {
				if strings.HasPrefix(c, "sgdisk") || strings.HasPrefix(c, "mkfs") || strings.HasPrefix(c, "wipefs") {
					t.Errorf("%q ran", c)
				}
				if strings.HasPrefix(c, "mount -t ext4 ") && !strings.HasPrefix(c, "mount -t ext4 -o noatime,nosuid,nodev,noexec /dev/vdb1 ") {
					t.Errorf("%q: the state filesystem is mounted runnable before its record is checked", c)
				}
				if strings.HasPrefix(c, "mount -o remount,noatime,suid,dev,exec ") {
					remounts++
				}
				if strings.HasPrefix(c, "mount --bind") {
					binds++
				}
				if strings.HasPrefix(c, "umount ") {
					umounts++
				}
			}
			if (remounts > 0) == tc.foreign {
				t.Errorf("%d remounts for use; want one only for a partition that is used", remounts)
			}
			if tc.foreign {
				if binds != 0 || umounts != 1 || a.status.ForeignState != "/dev/vdb1" || !a.status.FirstBoot {
					t.Errorf("foreign partition: %d binds, %d umounts, status %+v", binds, umounts, a.status)
				}
				if b, _ := os.ReadFile(filepath.Join(root, "/var/lib/kiln/config.ign")); string(b) != stored {
					t.Errorf("the foreign partition's config was overwritten: %s", b)
				}
				if _, err := os.Stat(filepath.Join(root, "/var/lib/kiln/config.ign.sha512")); !os.IsNotExist(err) {
					t.Errorf("a hash was recorded on the foreign partition: %v", err)
				}
			} else if binds == 0 || umounts != 0 {
				t.Errorf("own partition: %d binds, %d umounts", binds, umounts)
			}
		})
	}
}

// A state partition of a layout this kiln does not know (a newer kiln's)
// stops the agent: the node does not go on with its state in RAM, which
// would make a genesis node start a new cluster. The partition is left
// unmounted and nothing on it or on the node is written.
func TestUnknownStateLayoutStopsTheAgent(t *testing.T) {
	const fwCfg = `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/motd","contents":{"source":"data:,fwcfg"}}]}}`
	root := nodeRoot(t, fwCfg)
	for p, d := range map[string]string{
		"/var/lib/kiln-state/kiln-machine.json": `{"version":1,"macs":["52:54:00:00:00:01"]}`,
		"/var/lib/kiln-state/kiln-layout.json":  `{"layout":9,"writtenBy":"v9.0.0"}`,
		"/var/lib/kiln/config.ign":              fwCfg,
	} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(root, p), []byte(d), 0o600)
	}
	before := snapshot(t, root)
	sys := &fakeSys{answers: map[string]answer{"blkid -o device -t LABEL=KILN-STATE": {"/dev/vdb1\n", nil}}}
	var out bytes.Buffer
	a := &Agent{Root: root, Console: &out, Sys: sys, Machine: fakeMachine{MACs: []string{"52:54:00:00:00:01"}}, Version: "v1.0.0"}
	if err := a.Run(context.Background()); err == nil {
		t.Fatalf("the agent ran on an unknown state layout:\n%s", out.String())
	}
	got := finalLines(out.String())
	want := "kiln-firstboot: error: the KILN-STATE filesystem on /dev/vdb1 has state layout 9, written by kiln v9.0.0; this kiln (v1.0.0) knows layouts up to 2"
	if len(got) != 1 || !strings.HasPrefix(got[0], want) || !strings.HasSuffix(got[0], "nothing was changed") {
		t.Fatalf("final lines %q, want one starting %q", got, want)
	}
	for _, c := range sys.cmds {
		if strings.HasPrefix(c, "mount -o remount") || strings.HasPrefix(c, "mount --bind") || strings.HasPrefix(c, "sgdisk") || strings.HasPrefix(c, "mkfs") {
			t.Errorf("%q ran", c)
		}
	}
	after := snapshot(t, root)
	delete(after, statusPath)
	for p, d := range before {
		if after[p] != d {
			t.Errorf("%s changed", p)
		}
	}
	if len(after) != len(before) {
		t.Errorf("files written: before %v after %v", keys(before), keys(after))
	}
}

// An agent that fails on the trying boot of a staged slot fails the
// boot at once (the role does not run after it, so the boot could not
// pass its gate) and reboots onto the active slot.
func TestAgentFailureFailsATryingBoot(t *testing.T) {
	trying := bootslot.Record{Active: bootslot.A, Staged: bootslot.B, Phase: bootslot.PhaseStaged, SlotA: imgV1, SlotB: imgV2}
	root, store := slotRoot(t, "b", trying)
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	sys := &fakeSys{}
	var out bytes.Buffer
	if err := (&Agent{Root: root, Console: &out, Sys: sys}).Run(context.Background()); err == nil {
		t.Fatal("the agent found a config")
	}
	r, _ := store.Read()
	if !strings.HasPrefix(r.FailReason, "agent: no config found") {
		t.Errorf("record %q, want the agent's error as the reason", r.State())
	}
	if !slices.Contains(sys.cmds, "systemctl reboot") {
		t.Errorf("no reboot: %q", sys.cmds)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "kiln-firstboot: error: no config found") {
		t.Errorf("last line %q, want the agent's error", last)
	}
	if !strings.Contains(out.String(), "the trying boot of slot b failed (agent: no config found") {
		t.Errorf("console:\n%s", out.String())
	}
}
