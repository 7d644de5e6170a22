package site

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/internal/validation"
)

// restoreSite is a one-node site with restoreFrom (YAML lines indented
// under cluster), read from dir.
func restoreSite(restoreFrom string) []byte {
	return registriesSite("  restoreFrom:\n" + restoreFrom)
}

// writeSnapshot writes a file shaped like a snapshot saved through
// etcd's API (whole blocks, then their SHA-256) and returns its hash.
func writeSnapshot(t *testing.T, path string, damage func([]byte) []byte) string {
	t.Helper()
	body := make([]byte, 8192)
	for i := range body {
		body[i] = byte(i)
	}
	sum := sha256.Sum256(body)
	data := append(body, sum[:]...)
	if damage != nil {
		data = damage(data)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	whole := sha256.Sum256(data)
	return hex.EncodeToString(whole[:])
}

func TestRestoreFrom(t *testing.T) {
	dir := t.TempDir()
	good := writeSnapshot(t, filepath.Join(dir, "good.db"), nil)
	writeSnapshot(t, filepath.Join(dir, "truncated.db"), func(b []byte) []byte { return b[:5000] })
	writeSnapshot(t, filepath.Join(dir, "corrupt.db"), func(b []byte) []byte { b[10] ^= 0xff; return b })
	hexSum := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name        string
		restoreFrom string
		wantPath    string // "" for no problem
		wantReason  string
	}{
		{"a snapshot file, relative to the site", "    file: good.db\n", "", ""},
		{"a file with its matching sha256", "    {file: good.db, sha256: " + good + "}\n", "", ""},
		{"a URL with its sha256", "    {url: https://backups.lab/snap.db, sha256: " + hexSum + "}\n", "", ""},
		{"an http URL: the hash verifies it", "    {url: http://backups.lab/snap.db, sha256: " + strings.ToUpper(hexSum) + "}\n", "", ""},
		{"nothing named", "    {allowUnknownCluster: true}\n", "cluster.restoreFrom", "names no snapshot"},
		{"both file and url", "    {file: good.db, url: https://b/s.db, sha256: " + hexSum + "}\n", "cluster.restoreFrom", "both file and url"},
		{"a missing file", "    file: gone.db\n", "cluster.restoreFrom.file", "cannot read"},
		{"a directory", "    file: .\n", "cluster.restoreFrom.file", "is a directory"},
		{"a truncated snapshot", "    file: truncated.db\n", "cluster.restoreFrom.file", "integrity check failed"},
		{"a corrupted snapshot", "    file: corrupt.db\n", "cluster.restoreFrom.file", "truncated or corrupted"},
		{"a file with another sha256", "    {file: good.db, sha256: " + hexSum + "}\n", "cluster.restoreFrom.sha256", "has SHA-256 " + good},
		{"a URL without sha256", "    url: https://backups.lab/snap.db\n", "cluster.restoreFrom.sha256", "required with url"},
		{"a URL with a short sha256", "    {url: https://backups.lab/snap.db, sha256: abc}\n", "cluster.restoreFrom.sha256", "64 hex digits"},
		{"a tftp URL", "    {url: tftp://boot/snap.db, sha256: " + hexSum + "}\n", "cluster.restoreFrom.url", "not an https://"},
		{"a URL with a password", "    {url: https://u:p@b/snap.db, sha256: " + hexSum + "}\n", "cluster.restoreFrom.url", "password"},
		{"an unknown key", "    {file: good.db, allowForeign: true}\n", "cluster.restoreFrom.allowForeign", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(filepath.Join(dir, "site.yaml"), restoreSite(tc.restoreFrom))
			if tc.wantPath == "" {
				if err != nil {
					t.Fatal(err)
				}
				r := s.Cluster.RestoreFrom
				if r.File != "" && (r.SHA256 != good || len(r.Snapshot) != 8192+32) {
					t.Errorf("file read as sha256 %s, %d bytes; want %s, %d", r.SHA256, len(r.Snapshot), good, 8192+32)
				}
				if r.URL != "" && r.SHA256 != hexSum {
					t.Errorf("url's sha256 %q, want it in lower case", r.SHA256)
				}
				return
			}
			var l *validation.List
			if !errors.As(err, &l) {
				t.Fatalf("err = %v, want a validation list", err)
			}
			for _, e := range l.Errors {
				if e.Path == tc.wantPath && strings.Contains(e.Reason, tc.wantReason) {
					return
				}
			}
			t.Errorf("no problem at %s saying %q in:\n%v", tc.wantPath, tc.wantReason, err)
		})
	}
}

// A site printed in a message names its snapshot, never its bytes.
func TestRestoreFromDoesNotPrintTheSnapshot(t *testing.T) {
	r := RestoreFrom{File: "snap.db", Snapshot: []byte("SECRET-OBJECTS")}
	for _, s := range []string{r.String(), (&r).String()} {
		if strings.Contains(s, "SECRET") || !strings.Contains(s, "snap.db") {
			t.Errorf("printed as %q", s)
		}
	}
}
