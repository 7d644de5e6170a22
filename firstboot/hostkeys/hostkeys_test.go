package hostkeys

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/crypto/ssh"
)

// testTypes are Types with a small RSA key, to keep the test quick.
var testTypes = []Type{
	{"rsa", func() (crypto.PrivateKey, error) { return rsa.GenerateKey(rand.Reader, 1024) }},
	Types[1], Types[2],
}

func etcKeys(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, _ := os.ReadDir(filepath.Join(root, EtcDir))
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(root, EtcDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// Every boot rebuilds /etc from the image: the host keys come back from
// the state partition, the same keys, and none is made again.
func TestHostKeysAreMadeOnceAndKept(t *testing.T) {
	root := t.TempDir()
	in := Installer{Root: root, Types: testTypes}
	made, err := in.Install()
	want := []string{"ssh_host_rsa_key", "ssh_host_ecdsa_key", "ssh_host_ed25519_key"}
	if err != nil || !slices.Equal(made, want) {
		t.Fatalf("first boot: made %v, %v; want %v", made, err, want)
	}
	first := etcKeys(t, root)
	for _, name := range want {
		signer, err := ssh.ParsePrivateKey([]byte(first[name]))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := string(ssh.MarshalAuthorizedKey(signer.PublicKey())); got != first[name+".pub"] {
			t.Errorf("%s.pub = %q, not the key's public half %q", name, first[name+".pub"], got)
		}
		for _, p := range []string{filepath.Join(EtcDir, name), filepath.Join(Dir, name)} {
			if fi, err := os.Stat(filepath.Join(root, p)); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: %v, mode %v; want 0600", p, err, fi.Mode())
			}
		}
	}
	for boot := 2; boot <= 3; boot++ {
		os.RemoveAll(filepath.Join(root, "etc"))
		made, err := in.Install()
		if err != nil || len(made) != 0 {
			t.Fatalf("boot %d: made %v, %v; want none", boot, made, err)
		}
		if again := etcKeys(t, root); !maps.Equal(again, first) {
			t.Errorf("boot %d: the host keys changed", boot)
		}
	}
}

// A host key the node's config writes into /etc/ssh is the node's: kiln
// neither replaces it nor keeps one of its own for that type.
func TestHostKeyFromTheConfigIsLeftAlone(t *testing.T) {
	root := t.TempDir()
	own := filepath.Join(root, EtcDir, "ssh_host_ed25519_key")
	os.MkdirAll(filepath.Dir(own), 0o755)
	os.WriteFile(own, []byte("the config's key"), 0o600)
	made, err := Installer{Root: root, Types: testTypes}.Install()
	if err != nil || slices.Contains(made, "ssh_host_ed25519_key") || len(made) != 2 {
		t.Fatalf("made %v, %v", made, err)
	}
	if b, _ := os.ReadFile(own); string(b) != "the config's key" {
		t.Errorf("the config's key was replaced: %q", b)
	}
	if _, err := os.Stat(filepath.Join(root, Dir, "ssh_host_ed25519_key")); !os.IsNotExist(err) {
		t.Errorf("kiln kept an ed25519 key beside the config's: %v", err)
	}
}
