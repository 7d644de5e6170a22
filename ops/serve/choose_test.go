package serve

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/gen/site"
)

func TestRequestUUID(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"4c4c4544-0042-3510-8051-b4c04f4e3132", "4c4c4544-0042-3510-8051-b4c04f4e3132"},
		{"4C4C4544-0042-3510-8051-B4C04F4E3132", "4c4c4544-0042-3510-8051-b4c04f4e3132"},
		{" 4c4c4544-0042-3510-8051-b4c04f4e3132\n", "4c4c4544-0042-3510-8051-b4c04f4e3132"},
		{"", ""},
		{"00000000-0000-0000-0000-000000000000", ""},
		{"FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", ""},
		{"03000200-0400-0500-0006-000700080009", ""},
		{"not-a-uuid", "not-a-uuid"},
	} {
		if got := requestUUID(tc.in); got != tc.want {
			t.Errorf("requestUUID(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// UUIDs the selection test's site names: m1 (genesis) and w1 (worker)
// name one, m2, m3 and w2 none.
const (
	m1UUID = "4c4c4544-0042-3510-8051-b4c04f4e3101"
	w1UUID = "4c4c4544-0042-3510-8051-b4c04f4e3121"
)

func TestNodeScriptPicksTheNodeByMACAndUUID(t *testing.T) {
	cfg := config(t)
	cfg.Site = copySite(t, func(s *site.Site) {
		s.Nodes[0].UUID = m1UUID
		s.Nodes[3].UUID = w1UUID
	})
	r := start(t, cfg)
	const (
		m1MAC, w1MAC, w2MAC = "52-54-00-10-00-11", "52-54-00-10-00-21", "52-54-00-10-00-22"
		newMAC              = "52-54-00-10-00-99" // in no node
		otherUUID           = "4c4c4544-0042-3510-8051-b4c04f4e3199"
		zeroUUID            = "00000000-0000-0000-0000-000000000000"
	)
	for _, c := range []struct {
		name, mac, uuid string
		node            string // the node booted; "" for none
		byUUID          bool   // booted by UUID: the script says so
		refused         string // part of the refusal on the console, in the log and on the named nodes' status
		named           []string
		unknown         string // the console's line for a machine the site does not know
	}{
		{name: "MAC, no UUID sent", mac: w2MAC, node: "w2"},
		{name: "MAC of a node that names no UUID, any UUID", mac: w2MAC, uuid: otherUUID, node: "w2"},
		{name: "MAC and UUID agree", mac: w1MAC, uuid: w1UUID, node: "w1"},
		{name: "MAC and UUID agree, UUID in upper case", mac: w1MAC, uuid: strings.ToUpper(w1UUID), node: "w1"},
		{name: "UUID, the MAC in no node", mac: newMAC, uuid: w1UUID, node: "w1", byUUID: true},
		{name: "UUID of the genesis node, the MAC in no node", mac: newMAC, uuid: m1UUID, node: "m1", byUUID: true},
		{name: "UUID, no MAC sent", uuid: strings.ToUpper(w1UUID), node: "w1", byUUID: true},
		{name: "MAC and UUID name different nodes", mac: w2MAC, uuid: w1UUID,
			refused: "MAC 52:54:00:10:00:22 is node w2's but UUID " + w1UUID + " is node w1's: it boots neither", named: []string{"w2", "w1"}},
		{name: "a master's MAC, a worker's UUID", mac: m1MAC, uuid: w1UUID,
			refused: "MAC 52:54:00:10:00:11 is node m1's but UUID " + w1UUID + " is node w1's", named: []string{"m1", "w1"}},
		{name: "the MAC of a node that names another UUID", mac: w1MAC, uuid: otherUUID,
			refused: "MAC 52:54:00:10:00:21 is node w1's, but the site names w1 by UUID " + w1UUID + " and this machine sent UUID " + otherUUID, named: []string{"w1"}},
		{name: "the MAC of a node that names a UUID, not a UUID sent", mac: w1MAC, uuid: "abc$def",
			refused: "MAC 52:54:00:10:00:21 is node w1's, but the site names w1 by UUID " + w1UUID + " and this machine sent UUID abc?def: it boots nothing", named: []string{"w1"}},
		{name: "unknown MAC and UUID", mac: newMAC, uuid: otherUUID, unknown: "no node in site lab has MAC " + newMAC + " or UUID " + otherUUID + "\n"},
		{name: "unknown MAC, no UUID", mac: newMAC, unknown: "no node in site lab has MAC " + newMAC + "\n"},
		{name: "unknown MAC, all-zero UUID", mac: newMAC, uuid: zeroUUID, unknown: "no node in site lab has MAC " + newMAC + "\n"},
		{name: "a node that names a UUID, none sent", mac: w1MAC, node: "w1"},
		{name: "a node that names a UUID, empty UUID", mac: w1MAC, uuid: "", node: "w1"},
		{name: "a node that names a UUID, all-zero UUID", mac: w1MAC, uuid: zeroUUID, node: "w1"},
		{name: "a node that names a UUID, placeholder UUID", mac: m1MAC, uuid: "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", node: "m1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			logged := len(r.log.String())
			code, body := get(t, nil, r.base+"/ipxe?mac="+c.mac+"&uuid="+strings.ReplaceAll(c.uuid, "$", "%24"))
			log := r.log.String()[logged:]
			if code != 200 || !strings.HasPrefix(body, "#!ipxe\n") {
				t.Fatalf("GET /ipxe = %d\n%s", code, body)
			}
			if c.node == "" {
				if strings.Contains(body, "kernel") || strings.Contains(body, "\nboot\n") || !strings.Contains(body, "\n:wait\n") {
					t.Errorf("the script boots something, or does not wait:\n%s", body)
				}
			}
			switch {
			case c.refused != "":
				if !strings.Contains(body, "echo kiln: site lab: "+c.refused) {
					t.Errorf("script\n%s\nwant the console to say %q", body, c.refused)
				}
				if !strings.Contains(log, "refused a machine at 127.0.0.1: "+c.refused) {
					t.Errorf("log\n%s\nwant a refusal with %q", log, c.refused)
				}
				for _, name := range c.named {
					n := r.byName[name]
					r.mu.Lock()
					last := n.fetches[len(n.fetches)-1]
					r.mu.Unlock()
					if last.What != "ipxe" || !strings.Contains(last.Refused, c.refused) {
						t.Errorf("%s's last fetch %+v, want the refused script", name, last)
					}
					if !strings.Contains(body, fmt.Sprintf("nodes[%d]", n.index)) {
						t.Errorf("script\n%s\ndoes not name nodes[%d] (%s) to correct", body, n.index, name)
					}
				}
			case c.unknown != "":
				if !strings.Contains(body, "echo kiln: "+c.unknown) {
					t.Errorf("script\n%s\nwant %q", body, c.unknown)
				}
				if !strings.Contains(log, "unknown machine: ") {
					t.Errorf("no log line for an unknown machine:\n%s", log)
				}
			default:
				if !strings.Contains(body, "node "+c.node+" ") || !strings.Contains(body, "\nkernel "+r.base+"/image/"+r.nodeImage(c.node)+"/vmlinuz ") ||
					!strings.Contains(body, "/config/"+c.node+".ign ") {
					t.Errorf("script does not boot %s:\n%s", c.node, body)
				}
				note := "echo kiln: no node in site lab has MAC " + c.mac + ": booting node " + c.node + " by its UUID " + strings.ToLower(c.uuid) + "\nkernel "
				if c.byUUID != strings.Contains(body, note) {
					t.Errorf("by UUID %v; script\n%s\nwant the note %q only by UUID", c.byUUID, body, note)
				}
				if want := c.node + ": iPXE script to 127.0.0.1 "; !strings.Contains(log, want) {
					t.Errorf("log\n%s\nwant %q", log, want)
				}
				if c.byUUID && !strings.Contains(log, "by UUID "+strings.ToLower(c.uuid)+": no node has its MAC") {
					t.Errorf("log\n%s\nwant the node chosen by UUID", log)
				}
			}
		})
	}
	// A master booted by UUID still gets its config only at one of its
	// MACs: the ARP table, not the UUID, decides.
	cfg.Arm = []string{"m1"}
	r = start(t, cfg)
	r.arp.set("52:54:00:10:00:99")
	get(t, nil, r.base+"/ipxe?mac=52-54-00-10-00-99&uuid="+m1UUID)
	if code, body := get(t, nil, r.base+"/config/m1.ign"); code != 403 || !strings.Contains(body, "its MAC is 52:54:00:10:00:99, not one of m1's") {
		t.Errorf("m1's config to a MAC the site does not name = %d %s, want 403", code, body)
	}
	if !strings.Contains(r.log.String(), "and a control-plane config goes only to one of them") {
		t.Errorf("log\n%s\nwant it to say m1's config goes only to its MACs", r.log)
	}
}

func TestStartRefusesBadUUIDs(t *testing.T) {
	for _, c := range []struct {
		name              string
		change            func(s *site.Site)
		wantField, wantIn string
	}{
		{"two nodes with one UUID", func(s *site.Site) {
			s.Nodes[0].UUID = m1UUID
			s.Nodes[3].UUID = strings.ToUpper(m1UUID)
		}, "nodes[3].uuid", "also node m1's"},
		{"not a UUID", func(s *site.Site) { s.Nodes[2].UUID = "m3" }, "nodes[2].uuid", `not a UUID: "m3"`},
		{"a placeholder", func(s *site.Site) { s.Nodes[4].UUID = "00000000-0000-0000-0000-000000000000" }, "nodes[4].uuid", "names no one machine"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config(t)
			cfg.Log = io.Discard
			cfg.Site = copySite(t, c.change)
			_, err := New(cfg)
			r, ok := err.(*Refusal)
			if !ok || !strings.HasSuffix(r.File, "site.yaml") || r.Field != c.wantField || !strings.Contains(r.What, c.wantIn) {
				t.Errorf("New: %v, want a refusal at site.yaml: %s with %q", err, c.wantField, c.wantIn)
			}
		})
	}
}
