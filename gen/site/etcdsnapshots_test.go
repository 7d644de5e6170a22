package site

import (
	"errors"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/validation"
)

func TestEtcdSnapshots(t *testing.T) {
	const head = `apiVersion: kiln.dev/v1alpha1
kind: Site
nodes:
  - {name: n1, role: genesis, macs: ["52:54:00:00:00:01"], installDisk: /dev/vda, network: {address: 10.0.0.2/24}}
cluster:
  name: c
  kubernetesVersion: v1.37.1
  podCIDR: 10.244.0.0/16
  serviceCIDR: 10.96.0.0/12
`
	for _, tc := range []struct {
		name    string
		yaml    string // cluster.etcdSnapshots, "" for none
		want    *nodefile.EtcdSnapshots
		wantErr string // the field path and the reason
	}{
		{name: "absent: every hour, keep 24", want: &nodefile.EtcdSnapshots{Every: "1h0m0s", Keep: 24}},
		{name: "both given", yaml: "{every: 30m, keep: 48}", want: &nodefile.EtcdSnapshots{Every: "30m0s", Keep: 48}},
		{name: "days", yaml: "{every: 1d}", want: &nodefile.EtcdSnapshots{Every: "24h0m0s", Keep: 24}},
		{name: "keep alone", yaml: "{keep: 3}", want: &nodefile.EtcdSnapshots{Every: "1h0m0s", Keep: 3}},
		{name: "every 0 turns them off", yaml: "{every: 0}"},
		{name: "every 0s turns them off", yaml: "{every: 0s, keep: 5}"},
		{name: "too often", yaml: "{every: 1m}", wantErr: "cluster.etcdSnapshots.every: 1m is more often than every 5m0s"},
		{name: "not a duration", yaml: "{every: hourly}", wantErr: `cluster.etcdSnapshots.every: must be a duration such as 1h, 30m or 1d, or 0 to turn snapshots off, got "hourly"`},
		{name: "a bare number", yaml: "{every: 60}", wantErr: `cluster.etcdSnapshots.every: must be a duration`},
		{name: "negative", yaml: "{every: -1h}", wantErr: `cluster.etcdSnapshots.every: must be a duration`},
		{name: "keep 0", yaml: "{keep: 0}", wantErr: "cluster.etcdSnapshots.keep: must be at least 1, got 0: to turn snapshots off, set every: 0"},
		{name: "unknown field", yaml: "{every: 1h, retain: 3}", wantErr: "cluster.etcdSnapshots.retain: unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := head
			if tc.yaml != "" {
				doc += "  etcdSnapshots: " + tc.yaml + "\n"
			}
			s, err := Parse("site.yaml", []byte(doc))
			if tc.wantErr != "" {
				var l *validation.List
				if !errors.As(err, &l) || !strings.Contains(err.Error(), "site.yaml") || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse = %v, want a validation error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := s.Cluster.EtcdSnapshots.Schedule()
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Errorf("schedule %+v, want %+v", got, tc.want)
			}
		})
	}
}
