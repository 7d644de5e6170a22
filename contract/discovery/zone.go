// Package discovery owns the zone the node-local CoreDNS serves for the
// apiserver discovery name: one A record per apiserver. kiln gen seeds it
// from the site's masters; the CoreDNS anchor rewrites it from the API.
package discovery

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
)

// NodeLocalAddress is where every node's CoreDNS listens, on a dummy
// interface: a link-local address that is the same on every node and
// never leaves it.
const NodeLocalAddress = "169.254.20.10"

// NodeLocalLink is the dummy interface that carries NodeLocalAddress
// (systemd-networkd makes it from the image's kiln-dns files).
const NodeLocalLink = "kiln-dns"

// TTL is short so a dropped apiserver leaves the answer quickly.
const TTL = 10

// Zone is the discovery zone: the name, a serial that grows with every
// rewrite, and the apiservers' addresses.
type Zone struct {
	Name       string
	Serial     uint32
	APIServers []netip.Addr
}

// Render returns the zone in RFC 1035 master-file form, records sorted so
// the same zone always gives the same bytes.
func (z Zone) Render() []byte {
	origin := strings.TrimSuffix(z.Name, ".") + "."
	addrs := append([]netip.Addr(nil), z.APIServers...)
	sort.Slice(addrs, func(i, j int) bool { return addrs[i].Less(addrs[j]) })
	var b strings.Builder
	fmt.Fprintf(&b, "; kiln discovery zone: the apiservers of the cluster\n$ORIGIN %s\n$TTL %d\n", origin, TTL)
	fmt.Fprintf(&b, "@\tIN\tSOA\tns.%s hostmaster.%s %d 60 30 3600 %d\n", origin, origin, z.Serial, TTL)
	fmt.Fprintf(&b, "@\tIN\tNS\tns.%s\n", origin)
	fmt.Fprintf(&b, "ns\tIN\tA\t%s\n", NodeLocalAddress)
	for i, a := range addrs {
		if i > 0 && a == addrs[i-1] {
			continue
		}
		rr := "A"
		if a.Is6() && !a.Is4In6() {
			rr = "AAAA"
		}
		fmt.Fprintf(&b, "@\tIN\t%s\t%s\n", rr, a.Unmap())
	}
	return []byte(b.String())
}
