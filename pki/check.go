package pki

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cloudflare/cfssl/helpers"

	"github.com/kiln-project/kiln/site"
)

// Info describes one certificate in the PKI directory.
type Info struct {
	Stem     string
	Subject  string
	Issuer   string
	IsCA     bool
	NotAfter time.Time
}

// Remaining is the time left before the certificate expires.
func (i Info) Remaining(now time.Time) time.Duration { return i.NotAfter.Sub(now) }

// Check lists every certificate in the directory (backups left out),
// sorted by stem.
func (st Store) Check() ([]Info, error) {
	var out []Info
	err := filepath.WalkDir(st.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != st.Dir && d.Name() == "backup" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".crt") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		cert, err := helpers.ParseCertificatePEM(data)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		rel, _ := filepath.Rel(st.Dir, path)
		out = append(out, Info{
			Stem: filepath.ToSlash(strings.TrimSuffix(rel, ".crt")), Subject: cert.Subject.String(),
			Issuer: cert.Issuer.CommonName, IsCA: cert.IsCA, NotAfter: cert.NotAfter,
		})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the PKI in %s: %w", st.Dir, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Stem < out[j].Stem })
	return out, nil
}

// Renew re-issues, under the same CAs, every leaf certificate of the site
// that expires within the given time: a new key and certificate with the
// site's current names and lifetime. The old pair is copied to
// backup/<time>/ first. CAs are not renewed here. It returns the renewed
// stems.
func (st Store) Renew(s *site.Site, within time.Duration) ([]string, error) {
	now := st.now()
	var renewed []string
	var backup string
	for _, l := range Leaves(s) {
		e, ok, ps := st.read(l.Stem)
		if len(ps) > 0 {
			return renewed, ps
		}
		if !ok || e.cert.NotAfter.Sub(now) > within {
			continue // kiln gen issues what is missing
		}
		if backup == "" {
			var err error
			if backup, err = st.newBackupDir(); err != nil {
				return renewed, err
			}
		}
		if err := st.replace(backup, l, e.Pair, s.Cluster.LeafValidity()); err != nil {
			return renewed, err
		}
		renewed = append(renewed, l.Stem)
	}
	return renewed, nil
}
