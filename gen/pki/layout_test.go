package pki

import (
	"strings"
	"testing"
)

// The help's list of the PKI directory names every file kiln gen writes
// there: each CA, the service-account pair, the encryption key, the
// super-admin pair, and a master's own leaves.
func TestLayoutNamesEveryFile(t *testing.T) {
	all := strings.Join(Layout(), "\n")
	for _, want := range []string{"ca.{crt,key}", "etcd/ca.{crt,key}", "front-proxy-ca.{crt,key}", "sa.{key,pub}", EncryptionKeyFile,
		SuperAdminStem + ".{crt,key}", "apiserver-kubelet-client.{crt,key}", "nodes/<node>/kubelet-client.{crt,key}", "nodes/<node>/agent.{crt,key}", "nodes/<node>/etcd-peer.{crt,key}"} {
		if !strings.Contains(all, want) {
			t.Errorf("the layout does not name %s:\n%s", want, all)
		}
	}
}
