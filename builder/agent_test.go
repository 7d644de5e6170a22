package builder

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/firstboot/imageconf"
	"github.com/kiln-project/kiln/images"
)

func testCAPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "site CA"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<32, 0)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// The agent learns the spec's configTrust from a file in the image; the
// default is to refuse unverified configs and trust the system roots.
func TestAgentSettingsCarryConfigTrust(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "site-ca.pem"), testCAPEM(t), 0o644)
	os.WriteFile(filepath.Join(dir, "key.pem"), []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"), 0o600)
	tests := []struct {
		name     string
		trust    images.ConfigTrust
		want     string // the settings file
		wantFile string // a CA bundle baked in
		wantErr  string
	}{
		{"default", images.ConfigTrust{}, "{\n  \"allowUnverifiedConfig\": false\n}\n", "", ""},
		{"unverified allowed and a CA", images.ConfigTrust{AllowUnverified: true, CABundles: []string{"site-ca.pem"}},
			"{\n  \"allowUnverifiedConfig\": true,\n  \"caBundles\": [\n    \"/usr/lib/kiln/config-ca/0-site-ca.pem\"\n  ]\n}\n", "/usr/lib/kiln/config-ca/0-site-ca.pem", ""},
		{"a missing bundle", images.ConfigTrust{CABundles: []string{"nope.pem"}}, "", "", "configTrust.caBundles[0]: "},
		{"a key instead of a CA", images.ConfigTrust{CABundles: []string{"site-ca.pem", "key.pem"}}, "", "", "configTrust.caBundles[1] (key.pem): PEM block 1 is a EC PRIVATE KEY"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := &build{spec: &images.Spec{Dir: dir, ConfigTrust: tc.trust}}
			files, err := b.agentSettings()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("agentSettings: %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, f := range files {
				got[f.path] = f.data
			}
			if got[imageconf.Path] != tc.want {
				t.Errorf("%s:\n%s\nwant:\n%s", imageconf.Path, got[imageconf.Path], tc.want)
			}
			if _, ok := got[tc.wantFile]; tc.wantFile != "" && !ok {
				t.Errorf("%s not baked in (files %v)", tc.wantFile, files)
			}
		})
	}
}

// sshd must take the host keys kept on the state partition, once the
// agent has mounted it, and nothing at boot may make new ones.
func TestSSHDoesNotMakeHostKeysAtBoot(t *testing.T) {
	var conf string
	for _, f := range nodeFiles() {
		if f.path == sshHostKeysDropIn {
			conf = f.data
		}
	}
	for _, want := range []string{"[Unit]\nAfter=kiln-firstboot.service\n", "[Service]\nExecStartPre=\nExecStartPre=/usr/bin/kiln firstboot host-keys\nExecStartPre=/usr/sbin/sshd -t\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("%s lacks %q:\n%s", sshHostKeysDropIn, want, conf)
		}
	}
	if strings.Contains(conf, "ssh-keygen") {
		t.Errorf("%s still runs ssh-keygen:\n%s", sshHostKeysDropIn, conf)
	}
}
