package machine

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestSame(t *testing.T) {
	a := ID{ProductUUID: "4c4c4544-0042-3510-8051-b4c04f4e3132", MACs: []string{"52:54:00:00:00:01", "52:54:00:00:00:02"}}
	tests := []struct {
		name     string
		recorded ID
		this     ID
		want     bool
	}{
		{"the same machine", a, a, true},
		{"a NIC replaced, same UUID", a, ID{ProductUUID: a.ProductUUID, MACs: []string{"52:54:00:00:00:09"}}, true},
		{"another machine with one of the NICs moved in", a, ID{ProductUUID: "4c4c4544-0000-0000-0000-000000000001", MACs: []string{"52:54:00:00:00:01"}}, false},
		{"no UUID: one NIC in common", ID{MACs: a.MACs}, ID{MACs: []string{"52:54:00:00:00:02", "52:54:00:00:00:03"}}, true},
		{"no UUID: no NIC in common", ID{MACs: a.MACs}, ID{MACs: []string{"52:54:00:00:00:03"}}, false},
		{"UUID recorded, unreadable now: the NICs decide", a, ID{MACs: a.MACs[:1]}, true},
		{"nothing recorded", ID{}, a, false},
		{"nothing known of this machine", a, ID{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Same(tc.recorded, tc.this); got != tc.want {
				t.Fatalf("Same(%v, %v) = %v, want %v", tc.recorded, tc.this, got, tc.want)
			}
		})
	}
}

func TestSysfsIdentity(t *testing.T) {
	tests := []struct {
		name string
		uuid string // "" for no file
		nics map[string]string
		phys []string // NICs backed by a device
		want ID
	}{
		{"uuid and physical NICs", "4C4C4544-0042-3510-8051-B4C04F4E3132\n",
			map[string]string{"lo": "00:00:00:00:00:00", "eth1": "52:54:00:00:00:02", "eth0": "52:54:00:00:00:01", "br0": "52:54:00:00:00:01", "veth0": "aa:aa:aa:aa:aa:aa"},
			[]string{"eth0", "eth1"},
			ID{ProductUUID: "4c4c4544-0042-3510-8051-b4c04f4e3132", MACs: []string{"52:54:00:00:00:01", "52:54:00:00:00:02"}}},
		{"an all-zero UUID (QEMU without -uuid) counts as none", "00000000-0000-0000-0000-000000000000\n",
			map[string]string{"ens3": "52:54:00:12:34:56"}, []string{"ens3"}, ID{MACs: []string{"52:54:00:12:34:56"}}},
		{"a known placeholder counts as none", "03000200-0400-0500-0006-000700080009", nil, nil, ID{}},
		{"no DMI at all", "", map[string]string{"ens3": "52:54:00:12:34:56"}, []string{"ens3"}, ID{MACs: []string{"52:54:00:12:34:56"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.uuid != "" {
				write(t, filepath.Join(root, "/sys/class/dmi/id/product_uuid"), tc.uuid)
			}
			for nic, mac := range tc.nics {
				write(t, filepath.Join(root, "/sys/class/net", nic, "address"), mac+"\n")
				if slices.Contains(tc.phys, nic) {
					os.MkdirAll(filepath.Join(root, "/sys/class/net", nic, "device"), 0o755)
				}
			}
			got, err := Sysfs{Root: root}.Identity()
			if err != nil || got.ProductUUID != tc.want.ProductUUID || !slices.Equal(got.MACs, tc.want.MACs) {
				t.Fatalf("Identity = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func write(t *testing.T, p, data string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
