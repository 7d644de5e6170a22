package ignition

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"
)

// Hash is data's digest in the form Ignition's verification.hash takes:
// "sha512-<hex>".
func Hash(data []byte) string {
	sum := sha512.Sum512(data)
	return "sha512-" + hex.EncodeToString(sum[:])
}

// CheckHashSpec reports whether want is "sha256-<hex>" or "sha512-<hex>"
// with a digest of the algorithm's length.
func CheckHashSpec(want string) error {
	_, _, err := parseHashSpec(want)
	return err
}

// VerifyHash checks data against want ("sha256-<hex>" or
// "sha512-<hex>"); what names the data in the error.
func VerifyHash(data []byte, want, what string) error {
	h, sum, err := parseHashSpec(want)
	if err != nil {
		return err
	}
	algo, _, _ := strings.Cut(want, "-")
	h.Write(data)
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return fmt.Errorf("verification failed: %s is %s-%s, not %s", what, algo, got, want)
	}
	return nil
}

// HashLike is data's digest in the algorithm of spec ("sha256-<hex>" or
// "sha512-<hex>"), in the same form: what to show beside a hash that
// data does not match.
func HashLike(data []byte, spec string) (string, error) {
	h, _, err := parseHashSpec(spec)
	if err != nil {
		return "", err
	}
	algo, _, _ := strings.Cut(spec, "-")
	h.Write(data)
	return algo + "-" + hex.EncodeToString(h.Sum(nil)), nil
}

func parseHashSpec(want string) (hash.Hash, string, error) {
	algo, sum, ok := strings.Cut(want, "-")
	var h hash.Hash
	switch {
	case !ok:
		return nil, "", fmt.Errorf("verification hash %q is not <algo>-<hex>", want)
	case algo == "sha256":
		h = sha256.New()
	case algo == "sha512":
		h = sha512.New()
	default:
		return nil, "", fmt.Errorf("verification hash algorithm %q is not supported (sha256, sha512)", algo)
	}
	if b, err := hex.DecodeString(sum); err != nil || len(b) != h.Size() {
		return nil, "", fmt.Errorf("verification hash %q: not %d bytes of hex for %s", want, h.Size(), algo)
	}
	return h, strings.ToLower(sum), nil
}
