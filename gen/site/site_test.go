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
