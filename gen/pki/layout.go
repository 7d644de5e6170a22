package pki

import (
	"fmt"
	"strings"

	"github.com/kiln-project/kiln/gen/site"
)

// Layout describes, one line each, every file kiln gen keeps in the PKI
// directory, from the same lists it issues them from: the CAs, the
// service-account pair, the Secrets' encryption key, the cluster-wide
// leaves, and a node's leaves with <node> for its name (a worker has the
// kubelet's two, a master all of them).
func Layout() []string {
	var lines []string
	for _, ca := range CAs {
		lines = append(lines, fmt.Sprintf("%s.{crt,key}\tthe %s CA", ca.Stem, ca.CN))
	}
	lines = append(lines,
		fmt.Sprintf("%s.{key,pub}\tthe service-account token signing pair", ServiceAccountKey),
		EncryptionKeyFile+"\tthe key Secrets are encrypted with in etcd")
	s := &site.Site{}
	for _, l := range Leaves(s) {
		lines = append(lines, leafLine(l))
	}
	for _, l := range NodeLeaves(s, site.Node{Name: "<node>", Role: site.RoleGenesis}) {
		lines = append(lines, leafLine(l))
	}
	return lines
}

func leafLine(l Leaf) string {
	who := "CN " + l.CN
	if len(l.Orgs) > 0 {
		who += ", O " + strings.Join(l.Orgs, ",")
	}
	return fmt.Sprintf("%s.{crt,key}\t%s (CA %s)", l.Stem, who, l.CA.Stem)
}
