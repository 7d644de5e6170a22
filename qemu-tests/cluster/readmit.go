package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Readmit is what an operator does before re-imaging a removed node
// (docs/operations.md, Re-imaging a node): node name's certificates
// re-issued (kiln pki renew --node, with the site file at siteFile), its
// config rendered again from them, and its new kubelet credential
// admitted (kiln node admit, run by inNetns where the apiservers are
// reachable). It returns the node's new config and what the commands
// printed.
func Readmit(kiln, siteFile, pkiDir, name string, inNetns func(name string, args ...string) ([]byte, error)) ([]byte, string, error) {
	var log strings.Builder
	out, err := exec.Command(kiln, "pki", "renew", "--node", name, "-f", siteFile, "--pki", pkiDir).CombinedOutput()
	fmt.Fprintf(&log, "kiln pki renew --node %s:\n%s", name, out)
	if err != nil {
		return nil, log.String(), fmt.Errorf("kiln pki renew --node %s: %w", name, err)
	}
	site, err := os.ReadFile(siteFile)
	if err != nil {
		return nil, log.String(), err
	}
	cfgs, err := Configs(string(site), pkiDir)
	if err != nil {
		return nil, log.String(), err
	}
	cfg, ok := cfgs[name]
	if !ok {
		return nil, log.String(), fmt.Errorf("%s: no node %s", siteFile, name)
	}
	out, err = inNetns(kiln, "node", "admit", name, "-f", siteFile, "--pki", pkiDir)
	fmt.Fprintf(&log, "kiln node admit %s:\n%s", name, out)
	if err != nil {
		return nil, log.String(), fmt.Errorf("kiln node admit %s: %w", name, err)
	}
	return cfg, log.String(), nil
}
