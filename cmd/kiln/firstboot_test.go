package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ssh.service runs kiln firstboot host-keys on every boot: the keys it
// installs are the same each time /etc/ssh starts empty.
func TestHostKeysCommandKeepsTheKeys(t *testing.T) {
	root := t.TempDir()
	var pubs []string
	for boot := 1; boot <= 2; boot++ {
		os.RemoveAll(filepath.Join(root, "etc"))
		cmd := newFirstbootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetArgs([]string{"host-keys", "--root", root})
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		if said := strings.Contains(out.String(), "SSH host keys made: ssh_host_rsa_key, ssh_host_ecdsa_key, ssh_host_ed25519_key"); said != (boot == 1) {
			t.Errorf("boot %d said %q", boot, out.String())
		}
		b, err := os.ReadFile(filepath.Join(root, "etc/ssh/ssh_host_ed25519_key.pub"))
		if err != nil {
			t.Fatal(err)
		}
		pubs = append(pubs, string(b))
	}
	if pubs[0] != pubs[1] {
		t.Errorf("host key changed across boots: %q, %q", pubs[0], pubs[1])
	}
}
