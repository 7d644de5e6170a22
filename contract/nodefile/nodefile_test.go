package nodefile

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name, body, wantErr string
	}{
		{"ok", `{"apiVersion":"kiln.dev/v1alpha1","kind":"Node","name":"m1","role":"genesis","cluster":{"apiServerPort":6443},"masters":[{"name":"m1","address":"10.0.0.2"}]}`, ""},
		{"wrong kind", `{"apiVersion":"kiln.dev/v1alpha1","kind":"Site","name":"m1","role":"genesis"}`, "apiVersion/kind"},
		{"no role", `{"apiVersion":"kiln.dev/v1alpha1","kind":"Node","name":"m1"}`, "name and role are required"},
		{"not json", `{`, "node.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "node.json")
			os.WriteFile(p, []byte(tc.body), 0o644)
			f, err := Read(p)
			if tc.wantErr == "" {
				if err != nil || f.Masters[0].Address != "10.0.0.2" || f.Cluster.APIServerPort != 6443 {
					t.Fatalf("Read: %+v, %v", f, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("got %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

// A config change may not change a running node's name, role, address
// or cluster: each is named, with both values; the rest may change.
func TestIdentityChanges(t *testing.T) {
	w1 := NodeFile{Name: "w1", Role: RoleWorker, Address: "10.0.0.21", Cluster: ClusterParams{Name: "kiln", NTPServers: []string{"ntp1"}}, Labels: map[string]string{"a": "b"}}
	for _, tc := range []struct {
		name string
		edit func(*NodeFile)
		want []string
	}{
		{"labels, NTP servers and fallbacks", func(f *NodeFile) {
			f.Labels, f.Cluster.NTPServers, f.FallbackConfigs = nil, []string{"ntp2"}, []string{"sha512-00"}
		}, nil},
		{"name", func(f *NodeFile) { f.Name = "w2" }, []string{"name: w1 -> w2"}},
		{"role", func(f *NodeFile) { f.Role = RoleMaster }, []string{"role: worker -> master"}},
		{"address, to DHCP", func(f *NodeFile) { f.Address = "" }, []string{"address: 10.0.0.21 -> (none)"}},
		{"cluster", func(f *NodeFile) { f.Cluster.Name = "other" }, []string{"cluster.name: kiln -> other"}},
		{"all", func(f *NodeFile) {
			*f = NodeFile{Name: "m1", Role: RoleGenesis, Address: "10.1.0.11", Cluster: ClusterParams{Name: "x"}}
		},
			[]string{"name: w1 -> m1", "role: worker -> genesis", "address: 10.0.0.21 -> 10.1.0.11", "cluster.name: kiln -> x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			to := w1
			to.Cluster.NTPServers = slices.Clone(w1.Cluster.NTPServers)
			tc.edit(&to)
			if got := IdentityChanges(&w1, &to); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
