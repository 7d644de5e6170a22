package serve

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
)

// normalMAC is a MAC address as 12 lower-case hex digits, whatever its
// case and separators (52:54:00:AA:BB:CC, 52-54-00-aa-bb-cc,
// 5254.00aa.bbcc).
func normalMAC(s string) (string, bool) {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r == ':' || r == '-' || r == '.':
		case r >= '0' && r <= '9' || r >= 'a' && r <= 'f':
			b.WriteRune(r)
		default:
			return "", false
		}
	}
	if b.Len() != 12 {
		return "", false
	}
	return b.String(), true
}

// colonMAC writes a normalised MAC the usual way.
func colonMAC(m string) string {
	if len(m) != 12 {
		return m
	}
	parts := make([]string, 6)
	for i := range parts {
		parts[i] = m[2*i : 2*i+2]
	}
	return strings.Join(parts, ":")
}

// Neighbours finds the MAC address behind an IP address on a directly
// attached network: what says which machine a request came from.
type Neighbours interface {
	MAC(ip netip.Addr) (net.HardwareAddr, error)
}

// ARPTable reads the kernel's IPv4 neighbour table (/proc/net/arp). An
// address behind a router, or IPv6, has no entry: such a request cannot
// be matched to a node and gets no secret config.
type ARPTable struct{ Path string }

// MAC looks ip up in the table.
func (t ARPTable) MAC(ip netip.Addr) (net.HardwareAddr, error) {
	ip = ip.Unmap()
	f, err := os.Open(t.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		// IP address, HW type, Flags, HW address, Mask, Device
		fl := strings.Fields(sc.Text())
		if len(fl) < 4 || fl[0] != ip.String() {
			continue
		}
		if fl[2] == "0x0" { // incomplete
			break
		}
		return net.ParseMAC(fl[3])
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%s is not in %s (not on a directly attached network?)", ip, t.Path)
}
