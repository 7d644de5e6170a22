package pki

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"
)

// EncryptionKeyFile is the key the apiservers encrypt Secrets in etcd
// with: 32 random bytes, base64 on one line. Like the service-account
// key it is made once and never replaced: a cluster's Secrets can only
// be read with the key they were written with.
// It is no PEM key, so it is not named *.key.
const EncryptionKeyFile = "encryption-key.b64"

const encryptionKeySize = 32

// EncryptionKey reads the Secrets encryption key.
func (st Store) EncryptionKey() ([]byte, error) {
	key, ok, ps := st.readEncryptionKey()
	switch {
	case len(ps) > 0:
		return nil, ps
	case !ok:
		return nil, fmt.Errorf("%s: missing (kiln gen creates it)", st.encryptionKeyPath())
	}
	return key, nil
}

// readEncryptionKey reads and checks the key. ok is false when the file
// does not exist; anything but 32 bytes in base64 is a problem.
func (st Store) readEncryptionKey() (key []byte, ok bool, ps Problems) {
	path := st.encryptionKeyPath()
	data, have, ps := st.readFile(path)
	if !have || len(ps) > 0 {
		return nil, false, ps
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(data)))
	if err != nil || len(key) != encryptionKeySize {
		return nil, false, Problems{{path, fmt.Sprintf("not %d bytes in base64: restore it from your copy of the PKI; without it no Secret the cluster stored can be read", encryptionKeySize)}}
	}
	return key, true, nil
}

func (st Store) encryptionKeyPath() string { return filepath.Join(st.Dir, EncryptionKeyFile) }

func (st Store) createEncryptionKey() error {
	key := make([]byte, encryptionKeySize)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("making %s: %w", st.encryptionKeyPath(), err)
	}
	return st.writeFile(EncryptionKeyFile, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600)
}
