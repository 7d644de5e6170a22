package etcdsnapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// snapshotOf is body (whole 512-byte blocks, as a bolt database is)
// followed by its SHA-256, as etcd's API saves a snapshot.
func snapshotOf(body []byte) []byte {
	sum := sha256.Sum256(body)
	return append(append([]byte(nil), body...), sum[:]...)
}

func TestCheck(t *testing.T) {
	body := make([]byte, 4096)
	for i := range body {
		body[i] = byte(i * 7)
	}
	good := snapshotOf(body)
	corrupt := append([]byte(nil), good...)
	corrupt[100] ^= 1
	badTrailer := append([]byte(nil), good...)
	badTrailer[len(badTrailer)-1] ^= 1
	for _, tc := range []struct {
		name string
		data []byte
		ok   bool
	}{
		{"a whole snapshot", good, true},
		{"truncated mid-database", good[:2000], false},
		{"truncated to whole blocks plus 32 bytes", append(append([]byte(nil), good[:1024]...), good[len(good)-32:]...), false},
		{"its trailer cut off (a data directory's db)", good[:4096], false},
		{"a byte flipped in the database", corrupt, false},
		{"a byte flipped in the trailer", badTrailer, false},
		{"empty", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "snap.db")
			if err := os.WriteFile(p, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			sum, err := Check(p)
			if tc.ok {
				whole := sha256.Sum256(tc.data)
				if err != nil || sum != hex.EncodeToString(whole[:]) {
					t.Fatalf("Check = %q, %v; want the file's SHA-256", sum, err)
				}
				return
			}
			if !errors.Is(err, ErrIntegrity) {
				t.Fatalf("Check = %q, %v; want ErrIntegrity", sum, err)
			}
		})
	}
}

func TestIdentityRoundTrip(t *testing.T) {
	id := IdentityOf("lab", []byte("-----BEGIN CERTIFICATE-----\n"))
	if got := IdentityFromData(id.Data()); got != id {
		t.Errorf("IdentityFromData(Data()) = %+v, want %+v", got, id)
	}
	if len(id.CASHA256) != 64 {
		t.Errorf("CA hash %q is not hex SHA-256", id.CASHA256)
	}
}
