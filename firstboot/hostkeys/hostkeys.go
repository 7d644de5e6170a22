// Package hostkeys gives a node SSH host keys that outlive the boot: made
// once, kept on the state partition, copied into /etc/ssh (rebuilt from
// the image on every boot) each boot. A diskless node keeps them in RAM,
// so it has new ones each boot, as before.
package hostkeys

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kiln-project/kiln/internal/atomicfile"
	"golang.org/x/crypto/ssh"
)

// Where the keys live: Dir is under /var/lib/kiln, on the state partition.
const (
	Dir    = "/var/lib/kiln/ssh"
	EtcDir = "/etc/ssh"
)

// Type is one kind of host key, as ssh-keygen -A makes them.
type Type struct {
	Name     string // rsa, ecdsa, ed25519: ssh_host_<name>_key
	Generate func() (crypto.PrivateKey, error)
}

// Types are the host keys OpenSSH's sshd loads by default.
var Types = []Type{
	{"rsa", func() (crypto.PrivateKey, error) { return rsa.GenerateKey(rand.Reader, 3072) }},
	{"ecdsa", func() (crypto.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }},
	{"ed25519", func() (crypto.PrivateKey, error) { _, k, err := ed25519.GenerateKey(rand.Reader); return k, err }},
}

// Installer makes and installs the host keys under Root.
type Installer struct {
	Root  string // "/" on a node
	Types []Type // nil: Types
}

// Install makes every missing key in Dir and copies each into EtcDir
// with its public half, leaving alone a key the node's config already
// put in EtcDir. It returns the names of the keys it made.
func (in Installer) Install() ([]string, error) {
	types := in.Types
	if types == nil {
		types = Types
	}
	var made []string
	for _, t := range types {
		name := "ssh_host_" + t.Name + "_key"
		etc := filepath.Join(in.Root, EtcDir, name)
		if _, err := os.Lstat(etc); err == nil {
			continue
		}
		key, fresh, err := in.key(name, t)
		if err != nil {
			return made, err
		}
		if fresh {
			made = append(made, name)
		}
		if err := install(etc, key); err != nil {
			return made, err
		}
	}
	return made, nil
}

// key is the private key kept in Dir, made and stored on first use.
func (in Installer) key(name string, t Type) ([]byte, bool, error) {
	kept := filepath.Join(in.Root, Dir, name)
	data, err := os.ReadFile(kept)
	if err == nil {
		return data, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, false, fmt.Errorf("SSH host key %s: %w", kept, err)
	}
	k, err := t.Generate()
	if err != nil {
		return nil, false, fmt.Errorf("making the SSH %s host key: %w", t.Name, err)
	}
	block, err := ssh.MarshalPrivateKey(k, "kiln host key")
	if err != nil {
		return nil, false, fmt.Errorf("encoding the SSH %s host key: %w", t.Name, err)
	}
	data = pem.EncodeToMemory(block)
	if err := os.MkdirAll(filepath.Dir(kept), 0o700); err != nil {
		return nil, false, fmt.Errorf("SSH host keys: %w", err)
	}
	if err := atomicfile.WriteFile(kept, data, 0o600, nil); err != nil {
		return nil, false, err
	}
	return data, true, nil
}

// install writes the private key and its public half beside it.
func install(path string, private []byte) error {
	signer, err := ssh.ParsePrivateKey(private)
	if err != nil {
		return fmt.Errorf("SSH host key %s: %w", filepath.Base(path), err)
	}
	pub := ssh.MarshalAuthorizedKey(signer.PublicKey())
	if err := atomicfile.WriteFile(path+".pub", pub, 0o644, nil); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, private, 0o600, nil)
}
