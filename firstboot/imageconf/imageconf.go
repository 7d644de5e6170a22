// Package imageconf is what an image spec tells the node agent. The
// builder bakes it into the image as Path, with the CA bundles it names;
// the agent reads it on every boot. An image without the file (built by
// an earlier kiln) gets the defaults: no unverified configs, system roots.
package imageconf

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Where the builder puts the settings and the CA bundles in the image.
const (
	Path  = "/usr/lib/kiln/agent.json"
	CADir = "/usr/lib/kiln/config-ca"
)

// Settings are the image spec's configTrust, as the agent needs them.
type Settings struct {
	// AllowUnverifiedConfig lets a config from http, tftp or a config
	// drive be applied without kiln.config.hash=.
	AllowUnverifiedConfig bool `json:"allowUnverifiedConfig"`
	// CABundles are PEM files in the image that https config fetches
	// trust besides the system roots.
	CABundles []string `json:"caBundles,omitempty"`
}

// Load reads the settings under root; a missing file is the defaults.
func Load(root string) (Settings, error) {
	var s Settings
	data, err := os.ReadFile(filepath.Join(root, Path))
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("image settings: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("image settings %s: %w", Path, err)
	}
	return s, nil
}

// Marshal is the file the builder writes.
func (s Settings) Marshal() []byte {
	data, _ := json.MarshalIndent(s, "", "  ")
	return append(data, '\n')
}

// Roots is the system's CA pool plus the image's bundles; nil (the
// system roots as they are) when the image adds none.
func (s Settings) Roots(root string) (*x509.CertPool, error) {
	if len(s.CABundles) == 0 {
		return nil, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	for _, p := range s.CABundles {
		data, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return nil, fmt.Errorf("image CA bundle: %w", err)
		}
		if err := AddPEM(pool, data); err != nil {
			return nil, fmt.Errorf("image CA bundle %s: %w", p, err)
		}
	}
	return pool, nil
}

// AddPEM adds every certificate in a PEM bundle to pool; a bundle with
// none, or with a block that is not a certificate, is an error.
func AddPEM(pool *x509.CertPool, data []byte) error {
	n := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return fmt.Errorf("PEM block %d is a %s, not a CERTIFICATE", n+1, b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return fmt.Errorf("certificate %d: %w", n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return errors.New("no PEM certificate in it")
	}
	return nil
}
