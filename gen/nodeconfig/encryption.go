package nodeconfig

import (
	"encoding/base64"
	"fmt"
)

// EncryptionKeyName names the site's key in the encryption configuration:
// etcd holds every Secret prefixed k8s:enc:secretbox:v1:<name>:.
const EncryptionKeyName = "kiln-1"

// EncryptionConfig is the apiserver's EncryptionConfiguration: Secrets
// are written with secretbox (XSalsa20-Poly1305) under key; identity
// comes last so that Secrets stored before encryption was on still read
// (a write re-encrypts them).
func EncryptionConfig(key []byte) []byte {
	return fmt.Appendf(nil, `# written by kiln gen: Secrets are encrypted in etcd with the site's key
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources:
  - secrets
  providers:
  - secretbox:
      keys:
      - name: %s
        secret: %s
  - identity: {}
`, EncryptionKeyName, base64.StdEncoding.EncodeToString(key))
}
