package site

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/internal/validation"
)

func TestExampleSiteLoads(t *testing.T) {
	s, err := Load("../../examples/site.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := len(s.Masters()); got != 3 || s.Masters()[0].Role != RoleGenesis {
		t.Errorf("masters: %d, first %q; want 3 with genesis first", got, s.Masters()[0].Role)
	}
	if got := s.Cluster.ServiceIP(1).String(); got != "10.96.0.1" {
		t.Errorf("first service IP %s", got)
	}
	if got := s.Cluster.ServiceIP(10).String(); got != "10.96.0.10" {
		t.Errorf("cluster DNS IP %s", got)
	}
	if s.Cluster.CAValidity() != 87600*time.Hour || s.Cluster.LeafValidity() != 8760*time.Hour {
		t.Errorf("lifetimes %s, %s", s.Cluster.CAValidity(), s.Cluster.LeafValidity())
	}
}

func TestDefaults(t *testing.T) {
	s, err := Parse("min.yaml", []byte(`apiVersion: kiln.dev/v1alpha1
kind: Site
cluster: {name: c, kubernetesVersion: v1.37.1, podCIDR: 10.244.0.0/16, serviceCIDR: 10.96.0.0/12}
nodes:
  - {name: n1, role: genesis, macs: ["52:54:00:00:00:01"], installDisk: /dev/vda, network: {address: 10.0.0.2/24}}
`))
	if err != nil {
		t.Fatal(err)
	}
	c := s.Cluster
	for _, tc := range []struct{ field, got, want string }{
		{"domain", c.Domain, DefaultDomain},
		{"discoveryName", c.DiscoveryName, DefaultDiscoveryName},
		{"caValidity", c.Certificates.CAValidity, DefaultCAValidity},
		{"leafValidity", c.Certificates.LeafValidity, DefaultLeafValidity},
		{"timing", c.Timing, DefaultTiming},
	} {
		if tc.got != tc.want {
			t.Errorf("%s defaulted to %q, want %q", tc.field, tc.got, tc.want)
		}
	}
	if c.APIServerPort != DefaultAPIServerPort {
		t.Errorf("apiServerPort defaulted to %d", c.APIServerPort)
	}
}

// Every profile name loads as written; leaving it out means the default.
func TestTimingProfiles(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"", TimingDefault},
		{"timing: default", TimingDefault},
		{"timing: slow", TimingSlow},
	} {
		s, err := Parse("timing.yaml", []byte(`apiVersion: kiln.dev/v1alpha1
kind: Site
cluster: {name: c, kubernetesVersion: v1.37.1, podCIDR: 10.244.0.0/16, serviceCIDR: 10.96.0.0/12, `+tc.set+`}
nodes:
  - {name: n1, role: genesis, macs: ["52:54:00:00:00:01"], installDisk: /dev/vda, network: {address: 10.0.0.2/24}}
`))
		if err != nil {
			t.Errorf("%q: %v", tc.set, err)
			continue
		}
		if s.Cluster.Timing != tc.want {
			t.Errorf("%q: timing %q, want %q", tc.set, s.Cluster.Timing, tc.want)
		}
	}
}

// Each file under testdata/broken names the problems it must produce in
// "# want: <field path> | <part of the reason>" lines; the file must give
// exactly those, all at once.
func TestBrokenSitesReportEveryFieldPath(t *testing.T) {
	files, _ := filepath.Glob("testdata/broken/*.yaml")
	if len(files) < 20 {
		t.Fatalf("only %d broken site files", len(files))
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var want [][2]string
			for _, line := range strings.Split(string(data), "\n") {
				if rest, ok := strings.CutPrefix(line, "# want: "); ok {
					path, reason, _ := strings.Cut(rest, " | ")
					want = append(want, [2]string{path, reason})
				}
			}
			_, err = Load(f)
			var l *validation.List
			if !errors.As(err, &l) {
				t.Fatalf("got %v, want a validation list", err)
			}
			for _, e := range l.Errors {
				if e.File != f {
					t.Errorf("error names file %q, want %q", e.File, f)
				}
			}
			for _, w := range want {
				found := false
				for _, e := range l.Errors {
					found = found || e.Path == w[0] && strings.Contains(e.Reason, w[1])
				}
				if !found {
					t.Errorf("missing %s: ...%s...\ngot:\n%v", w[0], w[1], err)
				}
			}
			if len(l.Errors) != len(want) {
				t.Errorf("%d problems, want %d:\n%v", len(l.Errors), len(want), err)
			}
		})
	}
}

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"30d", 30 * 24 * time.Hour, true},
		{"8760h", 8760 * time.Hour, true},
		{"90m", 90 * time.Minute, true},
		{"3x", 0, false},
		{"d", 0, false},
		{"106751d", 106751 * 24 * time.Hour, true},
		{"106752d", 0, false},
		{"99999999d", 0, false},
		{"-99999999d", 0, false},
		{"2562048h", 0, false},
	} {
		got, err := ParseDuration(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseDuration(%q) = %s, %v", tc.in, got, err)
		}
	}
}

func TestSSHKeys(t *testing.T) {
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFm2Vh0bT0kLnaaQ4s6Ukq2nNQ4Xg7Jt0pH8YFZ9qY0c"
	for _, tc := range []struct {
		key, want string // want: part of the error, "" for none
	}{
		{key + " operator@lab", ""},
		{key, ""},
		{key + " two words", ""},
		{key + "\n", "holds a line break"},
		{key + "\r\n" + key, "holds a line break"},
		{`command="/bin/sh" ` + key, "options (command=\"/bin/sh\") are not accepted"},
		{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKiln ops@test", "not an SSH public key"},
		{"ssh-ed25519 not*base64", "not an SSH public key"},
		{"ssh-rsa " + strings.Fields(key)[1], "not an SSH public key"},
		{"", "not an SSH public key"},
	} {
		err := checkSSHKey(tc.key)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%q: %v, want %q", tc.key, err, tc.want)
		}
	}
}

func TestInstallDiskPaths(t *testing.T) {
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"/dev/vda", true},
		{"/dev/nvme0n1", true},
		{"/dev/disk/by-id/ata-Samsung_SSD_860_EVO_500GB_S3Z1NB0K123456X", true},
		{"/dev/disk/by-path/pci-0000:00:1f.2-ata-1.0", true},
		{"/dev/disk/by-id/wwn-0x5002538e40a1b2c3+part", true},
		{"/dev/sda; reboot", false},
		{"/dev/../etc/passwd", false},
		{"/dev/disk//by-id/x", false},
		{"/dev/sda/", false},
		{"/dev/", false},
		{"/dev", false},
		{"/etc/passwd", false},
		{"dev/sda", false},
		{"/dev/sda\n", false},
		{"/dev/$(reboot)", false},
	} {
		if got := isDevicePath(tc.path); got != tc.ok {
			t.Errorf("isDevicePath(%q) = %v, want %v", tc.path, got, tc.ok)
		}
	}
}

// A node's uuid is optional, read in any case and kept in lower case;
// one not in 8-4-4-4-12 form, a firmware placeholder, or one two nodes
// share is refused at the node's uuid field.
func TestNodeUUIDs(t *testing.T) {
	const u = "4c4c4544-0042-3510-8051-b4c04f4e3132"
	for _, tc := range []struct {
		name       string
		uuids      [2]string // of n1 and n2; "" leaves the field out
		want       [2]string // the loaded uuids, when valid
		wantErrors []string  // "<path> | <part of the reason>"
	}{
		{"none", [2]string{"", ""}, [2]string{"", ""}, nil},
		{"one node", [2]string{u, ""}, [2]string{u, ""}, nil},
		{"upper case is lowered", [2]string{strings.ToUpper(u), "4c4c4544-0042-3510-8051-b4c04f4e3133"}, [2]string{u, "4c4c4544-0042-3510-8051-b4c04f4e3133"}, nil},
		{"duplicate", [2]string{u, u}, [2]string{}, []string{"nodes[1].uuid | duplicate UUID " + u + " (also nodes[0].uuid)"}},
		{"duplicate in another case", [2]string{u, strings.ToUpper(u)}, [2]string{}, []string{"nodes[1].uuid | duplicate UUID " + u + " (also nodes[0].uuid)"}},
		{"too short", [2]string{"4c4c4544-0042-3510-8051", ""}, [2]string{}, []string{"nodes[0].uuid | not a UUID"}},
		{"no hyphens", [2]string{"4c4c4544004235108051b4c04f4e3132", ""}, [2]string{}, []string{"nodes[0].uuid | not a UUID"}},
		{"braces", [2]string{"{" + u + "}", ""}, [2]string{}, []string{"nodes[0].uuid | not a UUID"}},
		{"not hex", [2]string{"", "4c4c4544-0042-3510-8051-b4c04f4e313z"}, [2]string{}, []string{"nodes[1].uuid | not a UUID"}},
		{"all zeros", [2]string{"00000000-0000-0000-0000-000000000000", ""}, [2]string{}, []string{"nodes[0].uuid | is a placeholder"}},
		{"all ones", [2]string{"FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", ""}, [2]string{}, []string{"nodes[0].uuid | ffffffff-ffff-ffff-ffff-ffffffffffff is a placeholder"}},
		{"a bad one is no duplicate", [2]string{"x", "x"}, [2]string{}, []string{"nodes[0].uuid | not a UUID", "nodes[1].uuid | not a UUID"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			field := func(v string) string {
				if v == "" {
					return ""
				}
				return `, uuid: "` + v + `"`
			}
			s, err := Parse("uuid.yaml", []byte(`apiVersion: kiln.dev/v1alpha1
kind: Site
cluster: {name: c, kubernetesVersion: v1.37.1, podCIDR: 10.244.0.0/16, serviceCIDR: 10.96.0.0/12}
nodes:
  - {name: n1, role: genesis, macs: ["52:54:00:00:00:01"]`+field(tc.uuids[0])+`, installDisk: /dev/vda, network: {address: 10.0.0.2/24}}
  - {name: n2, role: worker, macs: ["52:54:00:00:00:02"]`+field(tc.uuids[1])+`, network: {dhcp: true}}
`))
			if tc.wantErrors == nil {
				if err != nil {
					t.Fatal(err)
				}
				for i, n := range s.Nodes {
					if n.UUID != tc.want[i] {
						t.Errorf("nodes[%d].uuid loaded as %q, want %q", i, n.UUID, tc.want[i])
					}
				}
				return
			}
			var l *validation.List
			if !errors.As(err, &l) {
				t.Fatalf("got %v, want a validation list", err)
			}
			for _, w := range tc.wantErrors {
				path, reason, _ := strings.Cut(w, " | ")
				found := false
				for _, e := range l.Errors {
					found = found || e.Path == path && strings.Contains(e.Reason, reason)
				}
				if !found {
					t.Errorf("missing %s: ...%s...\ngot:\n%v", path, reason, err)
				}
			}
			if len(l.Errors) != len(tc.wantErrors) {
				t.Errorf("%d problems, want %d:\n%v", len(l.Errors), len(tc.wantErrors), err)
			}
		})
	}
}
