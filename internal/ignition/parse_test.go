package ignition

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParseAcceptsEverySpecFrom30To35(t *testing.T) {
	for _, v := range []string{"3.0.0", "3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0"} {
		raw := fmt.Sprintf(`{"ignition":{"version":%q},"storage":{"files":[{"path":"/etc/x","contents":{"source":"data:,hi"}}]}}`, v)
		cfg, _, err := Parse([]byte(raw))
		if err != nil {
			t.Errorf("spec %s: %v", v, err)
			continue
		}
		if len(cfg.Storage.Files) != 1 || cfg.Storage.Files[0].Path != "/etc/x" {
			t.Errorf("spec %s: translated config lost the file: %+v", v, cfg.Storage)
		}
	}
}

func TestParseRejectsInvalidConfigsWithAReport(t *testing.T) {
	tests := []struct {
		name, raw, want string
	}{
		{"not JSON", `{"ignition":`, "unexpected end"},
		{"spec 2", `{"ignition":{"version":"2.3.0"}}`, "unsupported config version"},
		{"relative path", `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"etc/x"}]}}`, "$.storage.files.0.path"},
		{"duplicate file", `{"ignition":{"version":"3.3.0"},"storage":{"files":[{"path":"/a"},{"path":"/a"}]}}`, "duplicate"},
		{"bad hash form", `{"ignition":{"version":"3.0.0"},"storage":{"files":[{"path":"/a","contents":{"source":"data:,x","verification":{"hash":"md5-00"}}}]}}`, "hash"},
		{"unsupported luks", `{"ignition":{"version":"3.5.0"},"storage":{"luks":[{"name":"x","device":"/dev/vda"}]}}`, "storage.luks"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, report, err := Parse([]byte(tc.raw))
			var inv *InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("err = %v, want InvalidError", err)
			}
			all := err.Error() + "\n" + strings.Join(report, "\n")
			if !strings.Contains(all, tc.want) {
				t.Fatalf("report does not mention %q:\n%s", tc.want, all)
			}
		})
	}
}

// What kiln does not apply is rejected with its field path, never
// ignored; the state partition described as kiln makes it is accepted.
func TestParseRejectsWhatKilnDoesNotApply(t *testing.T) {
	const state = `{"label":"KILN-STATE"}`
	tests := []struct{ name, config, want string }{ // want "": accepted
		{"kiln gen's state partition", `"storage":{"disks":[{"device":"/dev/vda","partitions":[{"label":"KILN-STATE"}]}],
			"filesystems":[{"device":"/dev/disk/by-partlabel/KILN-STATE","format":"ext4","label":"KILN-STATE"}]}`, ""},
		{"a wiped state disk, numbered and sized", `"storage":{"disks":[{"device":"/dev/vdb","wipeTable":true,"partitions":[{"label":"KILN-STATE","number":1,"startMiB":0,"sizeMiB":1024,
			"typeGuid":"0fc63daf-8483-4772-8e79-3d69d8477de4","shouldExist":true}]}]}`, ""},
		{"the state filesystem only", `"storage":{"filesystems":[{"device":"/dev/disk/by-partlabel/KILN-STATE","wipeFilesystem":false}]}`, ""},
		{"another disk", `"storage":{"disks":[{"device":"/dev/vda","partitions":[` + state + `]},{"device":"/dev/sdb","wipeTable":true}]}`,
			"storage.disks[1] (/dev/sdb): only the disk holding the KILN-STATE partition is applied by kiln"},
		{"a partition on another disk", `"storage":{"disks":[{"device":"/dev/sdb","partitions":[{"label":"data"}]}]}`,
			"storage.disks[0] (/dev/sdb): only the disk holding the KILN-STATE partition"},
		{"another partition on the state disk", `"storage":{"disks":[{"device":"/dev/vda","partitions":[` + state + `,{"label":"data","sizeMiB":10}]}]}`,
			"storage.disks[0].partitions[1]: partitions other than KILN-STATE are not applied by kiln"},
		{"two state partitions", `"storage":{"disks":[{"device":"/dev/vda","partitions":[` + state + `]},{"device":"/dev/vdb","partitions":[` + state + `]}]}`,
			"storage.disks[1].partitions[0]: a second KILN-STATE partition (the first is storage.disks[0].partitions[0])"},
		{"a state partition kiln would not make", `"storage":{"disks":[{"device":"/dev/vda","partitions":[{"label":"KILN-STATE","typeGuid":"C12A7328-F81F-11D2-BA4B-00A0C93EC93B"}]}]}`,
			"storage.disks[0].partitions[0].typeGuid: not applied by kiln"},
		{"a resized state partition", `"storage":{"disks":[{"device":"/dev/vda","partitions":[{"label":"KILN-STATE","resize":true}]}]}`,
			"storage.disks[0].partitions[0].resize"},
		{"another filesystem", `"storage":{"filesystems":[{"device":"/dev/sdb1","format":"xfs","path":"/data"}]}`,
			"storage.filesystems[0] (/dev/sdb1): filesystems other than the state partition (/dev/disk/by-partlabel/KILN-STATE) are not applied by kiln"},
		{"the state filesystem as xfs", `"storage":{"filesystems":[{"device":"/dev/disk/by-partlabel/KILN-STATE","format":"xfs"}]}`,
			`storage.filesystems[0].format: "xfs" is not applied by kiln (the state partition is ext4)`},
		{"the state filesystem wiped", `"storage":{"filesystems":[{"device":"/dev/disk/by-partlabel/KILN-STATE","format":"ext4","wipeFilesystem":true}]}`,
			"storage.filesystems[0].wipeFilesystem: not applied by kiln (it never reformats a KILN-STATE filesystem)"},
		{"the state filesystem mounted", `"storage":{"filesystems":[{"device":"/dev/disk/by-partlabel/KILN-STATE","format":"ext4","path":"/var/lib/data"}]}`,
			"storage.filesystems[0].path: not applied by kiln"},
		{"raid", `"storage":{"raid":[{"name":"md0","level":"raid1","devices":["/dev/sda","/dev/sdb"]}]}`, "storage.raid[0]: RAID arrays are not applied by kiln"},
		{"kernel arguments", `"kernelArguments":{"shouldExist":["quiet"]}`, "kernelArguments: not applied by kiln"},
		{"merged config", `"ignition":{"version":"3.4.0","config":{"merge":[{"source":"https://example.com/more.ign"}]}}`, "ignition.config.merge[0]: kiln fetches no other config"},
		{"replacing config", `"ignition":{"version":"3.4.0","config":{"replace":{"source":"https://example.com/all.ign"}}}`, "ignition.config.replace: kiln fetches no other config"},
		{"timeouts", `"ignition":{"version":"3.4.0","timeouts":{"httpTotal":10}}`, "ignition.timeouts: not applied by kiln"},
		{"certificate authorities", `"ignition":{"version":"3.4.0","security":{"tls":{"certificateAuthorities":[{"source":"data:,x"}]}}}`,
			"ignition.security.tls.certificateAuthorities[0]: not applied by kiln"},
		{"proxy", `"ignition":{"version":"3.4.0","proxy":{"httpsProxy":"http://proxy:3128"}}`, "ignition.proxy: not applied by kiln"},
		{"http headers", `"storage":{"files":[{"path":"/a","contents":{"source":"https://example.com/a","httpHeaders":[{"name":"X","value":"y"}]}}]}`,
			"storage.files[0].contents.httpHeaders: not sent by kiln"},
		{"an s3 append", `"storage":{"files":[{"path":"/a","append":[{"source":"s3://bucket/a"}]}]}`,
			`storage.files[0].append[0].source: scheme "s3" is not supported by kiln (data, http, https, tftp)`},
		{"removing a user and a group", `"passwd":{"users":[{"name":"core","shouldExist":false}],"groups":[{"name":"games","shouldExist":false}]}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := `{"ignition":{"version":"3.4.0"},` + tc.config + `}`
			if strings.HasPrefix(tc.config, `"ignition"`) {
				raw = `{` + tc.config + `}`
			}
			_, report, err := Parse([]byte(raw))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("%v\n%s", err, strings.Join(report, "\n"))
				}
				return
			}
			var inv *InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("err = %v, want InvalidError", err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(strings.Join(report, "\n"), tc.want) {
				t.Fatalf("neither the error nor the report says %q:\n%v\n%s", tc.want, err, strings.Join(report, "\n"))
			}
		})
	}
}

// A config that deletes a user or group and uses it elsewhere is refused
// at the use, naming the deletion: applying it would fail half way.
func TestParseRefusesDeletingWhatTheConfigUses(t *testing.T) {
	const (
		goneUser  = `"users":[{"name":"gone","shouldExist":false}]`
		goneGroup = `"groups":[{"name":"old","shouldExist":false}]`
	)
	tests := []struct{ name, config, want string }{ // want "": accepted
		{"deleting unused names", `"passwd":{` + goneUser + `,` + goneGroup + `}`, ""},
		{"a user and its group by the same name", `"passwd":{"users":[{"name":"app","shouldExist":false}],"groups":[{"name":"app","shouldExist":false}]}`, ""},
		{"owners by id of a deleted user", `"passwd":{` + goneUser + `},"storage":{"files":[{"path":"/a","user":{"id":1001}}]}`, ""},
		{"root", `"passwd":{"users":[{"name":"root","shouldExist":false}]}`,
			"passwd.users[0].shouldExist: false would delete root"},
		{"a file owned by a deleted user", `"passwd":{` + goneUser + `},"storage":{"files":[{"path":"/a","user":{"name":"gone"}}]}`,
			`storage.files[0].user.name: user "gone" is deleted by passwd.users[0] (shouldExist: false)`},
		{"a directory of a deleted group", `"passwd":{` + goneGroup + `},"storage":{"directories":[{"path":"/d","group":{"name":"old"}}]}`,
			`storage.directories[0].group.name: group "old" is deleted by passwd.groups[0] (shouldExist: false)`},
		{"a link of a deleted user", `"passwd":{` + goneUser + `},"storage":{"links":[{"path":"/l","target":"/a","user":{"name":"gone"}}]}`,
			`storage.links[0].user.name: user "gone" is deleted by passwd.users[0] (shouldExist: false)`},
		{"a user whose primary group is deleted", `"passwd":{` + goneGroup + `,"users":[{"name":"app","primaryGroup":"old"}]}`,
			`passwd.users[0].primaryGroup: group "old" is deleted by passwd.groups[0] (shouldExist: false)`},
		{"a user in a deleted group", `"passwd":{` + goneGroup + `,"users":[{"name":"app","groups":["wheel","old"]}]}`,
			`passwd.users[0].groups[1]: group "old" is deleted by passwd.groups[0] (shouldExist: false)`},
		// The validator refuses a name listed twice, so a config cannot
		// create and delete one user.
		{"a user created and deleted", `"passwd":{"users":[{"name":"app"},{"name":"app","shouldExist":false}]}`,
			"duplicate entry"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, report, err := Parse([]byte(`{"ignition":{"version":"3.4.0"},` + tc.config + `}`))
			all := strings.Join(report, "\n")
			if tc.want == "" {
				if err != nil {
					t.Fatalf("%v\n%s", err, all)
				}
				return
			}
			if err == nil || !strings.Contains(all, tc.want) {
				t.Fatalf("err = %v, report:\n%s\nwant a line with %q", err, all, tc.want)
			}
		})
	}
}
