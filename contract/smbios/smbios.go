// Package smbios is what kiln's sides agree a machine's SMBIOS system
// UUID is: the one its firmware reports, which iPXE sends as ${uuid} and
// Linux shows in /sys/class/dmi/id/product_uuid. A site may name a node's
// (gen/site), kiln serve picks a node by it (ops/serve), and the agent
// records it to know its own state partition (firstboot/machine); all
// three must read it the same way and ignore the same placeholders.
package smbios

import "slices"

// ParseUUID reads a UUID in RFC 4122 text form (8-4-4-4-12 hex digits,
// any case) and returns it in lower case, the case Linux shows. Only the
// form is checked: firmware UUIDs need not carry RFC 4122's version and
// variant bits.
func ParseUUID(s string) (string, bool) {
	if len(s) != 36 {
		return "", false
	}
	b := []byte(s)
	for i, c := range b {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return "", false
			}
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		case c >= 'A' && c <= 'F':
			b[i] = c + ('a' - 'A')
		default:
			return "", false
		}
	}
	return string(b), true
}

// placeholders are UUIDs firmware reports when it has none of its own,
// or gives many machines alike.
var placeholders = []string{
	"00000000-0000-0000-0000-000000000000",
	"ffffffff-ffff-ffff-ffff-ffffffffffff",
	"03000200-0400-0500-0006-000700080009",
	"00020003-0004-0005-0006-000700080009",
}

// Placeholder reports whether u, in lower case, names no one machine.
func Placeholder(u string) bool { return slices.Contains(placeholders, u) }
