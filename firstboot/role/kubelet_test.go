package role

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/contract/nodefile"
)

// A static node registers its site address; a DHCP node the address its
// route to the first master leaves from, waited for while there is no
// route yet, within the bound.
func TestKubeletIP(t *testing.T) {
	masters := []nodefile.Member{{Name: "m1", Address: "10.77.0.11"}}
	noRoute := errors.New("network is unreachable")
	for _, tc := range []struct {
		name    string
		file    nodefile.NodeFile
		answers []error // nil: the route leaves from 10.77.0.21
		want    string
	}{
		{"static", nodefile.NodeFile{Address: "10.77.0.31", Masters: masters}, nil, "10.77.0.31"},
		{"DHCP", nodefile.NodeFile{Masters: masters}, []error{nil}, "10.77.0.21"},
		{"DHCP, the lease comes late", nodefile.NodeFile{Masters: masters}, []error{noRoute, noRoute, nil}, "10.77.0.21"},
		{"DHCP, never a route", nodefile.NodeFile{Masters: masters}, []error{noRoute, noRoute, noRoute, noRoute}, "error: a route to master m1 (10.77.0.11)"},
		{"DHCP, no master", nodefile.NodeFile{}, nil, "the node file lists no master"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			source := func(dst netip.Addr) (netip.Addr, error) {
				if dst.String() != "10.77.0.11" {
					t.Errorf("asked the route to %s", dst)
				}
				calls++
				if calls > len(tc.answers) || tc.answers[calls-1] != nil {
					return netip.Addr{}, noRoute
				}
				return netip.MustParseAddr("10.77.0.21"), nil
			}
			got, err := kubeletIP(context.Background(), &tc.file, source, 5*time.Second)
			if err != nil {
				got = "error: " + err.Error()
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// The kernel's choice on this machine: loopback reaches loopback.
func TestRouteSource(t *testing.T) {
	got, err := routeSource(netip.MustParseAddr("127.0.0.1"))
	if err != nil || got.String() != "127.0.0.1" {
		t.Fatalf("route to 127.0.0.1 leaves from %v, %v", got, err)
	}
}
