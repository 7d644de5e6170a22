package serve

import (
	"fmt"
	"strings"

	"github.com/kiln-project/kiln/contract/smbios"
)

// requestUUID is the UUID a machine's iPXE sent, in lower case, or ""
// when it sent none: firmware without a UUID of its own gives iPXE an
// empty ${uuid} or a placeholder such as all zeros. Anything else that is
// not a UUID is kept as sent: it names no node, and a node that names a
// UUID refuses it.
func requestUUID(raw string) string {
	raw = strings.TrimSpace(raw)
	u, ok := smbios.ParseUUID(raw)
	switch {
	case !ok:
		return raw
	case smbios.Placeholder(u):
		return ""
	}
	return u
}

// choice is the node a machine boots as, or why it boots none.
type choice struct {
	node   *node // nil: none
	byUUID bool  // node was chosen by UUID: no node has the MAC
	// refused says why a machine whose MAC or UUID names a node boots
	// nothing; named are those nodes. Both are empty for a machine the
	// site does not know.
	refused string
	named   []*node
}

// choose picks the node for a machine from the MAC and the UUID (as
// requestUUID reads it) its iPXE sent. The MAC decides; the UUID decides
// only when no node has the MAC, so that a machine with a new NIC boots
// as itself. A UUID that names another node than the MAC, or differs from
// the one the MAC's node names, boots nothing: the site says the machine
// is someone else.
func (s *Server) choose(mac, uuid string) choice {
	key, _ := normalMAC(mac)
	byMAC := s.byMAC[key]
	var byUUID *node
	if uuid != "" {
		byUUID = s.byUUID[uuid]
	}
	switch {
	case byMAC == nil && byUUID == nil:
		return choice{}
	case byMAC == nil:
		return choice{node: byUUID, byUUID: true}
	case uuid == "" || byUUID == byMAC:
		return choice{node: byMAC}
	case byUUID != nil:
		return choice{named: []*node{byMAC, byUUID},
			refused: fmt.Sprintf("MAC %s is node %s's but UUID %s is node %s's: it boots neither", colonMAC(key), byMAC.Name, printable(uuid), byUUID.Name)}
	case byMAC.UUID != "":
		return choice{named: []*node{byMAC},
			refused: fmt.Sprintf("MAC %s is node %s's, but the site names %s by UUID %s and this machine sent UUID %s: it boots nothing", colonMAC(key), byMAC.Name, byMAC.Name, byMAC.UUID, printable(uuid))}
	}
	return choice{node: byMAC}
}

// printable is a value from a request as a script or a log line may
// carry it: printable ASCII without what iPXE would expand or quote,
// at most 64 characters.
func printable(v string) string {
	v = strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '$' || r == '"' || r == '\\' {
			return '?'
		}
		return r
	}, v)
	if len(v) > 64 {
		v = v[:64] + "..."
	}
	return v
}

// waitScript prints lines on the console and waits for ever, booting
// nothing.
func waitScript(lines ...string) string {
	var b strings.Builder
	b.WriteString("#!ipxe\n")
	for _, l := range lines {
		b.WriteString("echo kiln: " + l + "\n")
	}
	b.WriteString(":wait\nsleep 3600\ngoto wait\n")
	return b.String()
}

// unknownScript is for a machine whose MAC and UUID name no node.
func unknownScript(siteName, mac, uuid string) string {
	if uuid == "" {
		return waitScript(fmt.Sprintf("no node in site %s has MAC %s", siteName, printable(mac)),
			"add it to the site file's nodes[].macs and restart kiln serve; this machine boots nothing until then")
	}
	return waitScript(fmt.Sprintf("no node in site %s has MAC %s or UUID %s", siteName, printable(mac), printable(uuid)),
		"add it to the site file's nodes[].macs (or nodes[].uuid) and restart kiln serve; this machine boots nothing until then")
}

// refusedScript is for a machine whose MAC and UUID disagree on its node.
func refusedScript(siteName string, c choice) string {
	fields := make([]string, len(c.named))
	for i, n := range c.named {
		fields[i] = fmt.Sprintf("nodes[%d]", n.index)
	}
	return waitScript("site "+siteName+": "+c.refused,
		"correct "+strings.Join(fields, " or ")+" (macs, uuid) in the site file and restart kiln serve")
}
