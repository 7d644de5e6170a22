package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	pathpkg "path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kiln-project/kiln/gen/site"
)

// Info describes one certificate in the PKI directory.
type Info struct {
	Stem      string
	Subject   string
	Issuer    string
	IsCA      bool
	NotBefore time.Time
	NotAfter  time.Time
}

// Remaining is the time left before the certificate expires.
func (i Info) Remaining(now time.Time) time.Duration { return i.NotAfter.Sub(now) }

// ErrNoPKI is Check's answer for a directory that is missing or holds no
// certificate or key at all.
var ErrNoPKI = errors.New("no PKI here (kiln gen creates one)")

// Check measures the directory: every certificate and key in it (backups
// left out) and, when s is not nil, every certificate the site expects,
// by the rules kiln gen uses to reuse one. It returns each certificate
// read, sorted by stem, and every problem found, one per file at fault
// and reason. warn is how close to its expiry a certificate is a problem;
// 0: its renew window. The error is for a directory Check cannot read.
func (st Store) Check(s *site.Site, warn time.Duration) ([]Info, Problems, error) {
	found, ps, err := st.stems()
	if err != nil {
		return nil, nil, err
	}
	c := checker{st: st, now: st.now(), warn: warn, expected: map[string]Leaf{}, ps: ps}
	if s != nil {
		c.validity = s.Cluster.LeafValidity()
		for _, l := range Leaves(s) {
			c.expected[l.Stem] = l
			found = append(found, l.Stem)
		}
	}
	c.checkCAs()
	c.checkServiceAccount()
	c.checkEncryptionKey()
	slices.Sort(found)
	for _, stem := range slices.Compact(found) {
		if !isCA(stem) && stem != ServiceAccountKey {
			c.checkLeaf(stem)
		}
	}
	slices.SortFunc(c.infos, func(a, b Info) int { return strings.Compare(a.Stem, b.Stem) })
	return c.infos, c.ps, nil
}

// checker gathers what Check finds.
type checker struct {
	st       Store
	now      time.Time
	warn     time.Duration
	expected map[string]Leaf
	validity time.Duration
	cas      map[string]*x509.Certificate // the CAs that could be read
	infos    []Info
	ps       Problems
}

func (c *checker) window(cert *x509.Certificate) time.Duration {
	if c.warn > 0 {
		return c.warn
	}
	return RenewWindow(lifetime(cert))
}

// read reads stem's pair, recording it and its problems. missing says
// that neither file exists.
func (c *checker) read(stem string) (e entry, ok, missing bool) {
	e, ok, bad := c.st.read(stem)
	c.ps.add(bad...)
	if ok {
		c.infos = append(c.infos, Info{Stem: stem, Subject: e.cert.Subject.String(), Issuer: e.cert.Issuer.CommonName,
			IsCA: e.cert.IsCA, NotBefore: e.cert.NotBefore, NotAfter: e.cert.NotAfter})
	}
	return e, ok, !ok && len(bad) == 0
}

func (c *checker) checkCAs() {
	c.cas = map[string]*x509.Certificate{}
	for _, ca := range CAs {
		path := c.st.path(ca.Stem, ".crt")
		e, ok, missing := c.read(ca.Stem)
		if missing {
			c.ps.add(Problem{path, "missing: " + caWayOut(c.st, ca.Stem)})
		}
		if !ok {
			continue
		}
		c.cas[ca.Stem] = e.cert
		c.ps.add(c.st.caProblems(ca, e.cert, c.now)...)
		if due := expiry(e.cert, c.now, c.window(e.cert)); due != "" && e.cert.NotAfter.After(c.now) {
			c.ps.add(Problem{path, "the CA " + due + ": kiln never re-issues a CA; plan a new PKI before then"})
		}
	}
}

func (c *checker) checkServiceAccount() {
	ok, bad := c.st.readServiceAccount()
	c.ps.add(bad...)
	if !ok && len(bad) == 0 {
		c.ps.add(Problem{c.st.path(ServiceAccountKey, ".key"), "missing, and so is sa.pub: kiln gen creates the pair"})
	}
}

func (c *checker) checkEncryptionKey() {
	_, ok, bad := c.st.readEncryptionKey()
	c.ps.add(bad...)
	if !ok && len(bad) == 0 {
		c.ps.add(Problem{c.st.encryptionKeyPath(), "missing: kiln gen creates it"})
	}
}

// checkLeaf measures one leaf: against the site when it expects the leaf,
// otherwise against the CAs of the directory alone.
func (c *checker) checkLeaf(stem string) {
	path := c.st.path(stem, ".crt")
	l, expected := c.expected[stem]
	e, ok, missing := c.read(stem)
	if missing && expected {
		c.ps.add(Problem{path, "missing: kiln gen issues it"})
	}
	if !ok {
		return
	}
	if expected {
		for _, why := range misfit(l, e.cert, c.cas[l.CA.Stem], c.validity) {
			c.ps.add(Problem{path, why + ": kiln gen re-issues it"})
		}
	} else if c.foreign(e.cert) {
		c.ps.add(Problem{path, fmt.Sprintf("signed by %q, which is none of the CAs in %s", e.cert.Issuer.String(), c.st.Dir)})
	}
	if due := expiry(e.cert, c.now, c.window(e.cert)); due != "" {
		c.ps.add(Problem{path, due + ": kiln gen re-issues it"})
	}
}

// foreign says that no CA of the directory signed cert, when every CA
// could be read to tell.
func (c *checker) foreign(cert *x509.Certificate) bool {
	if len(c.cas) < len(CAs) {
		return false
	}
	for _, ca := range c.cas {
		if signedBy(cert, ca) {
			return false
		}
	}
	return true
}

// stems lists the stems of every certificate and key in the directory,
// backups left out. A directory that is missing, is a file or holds no
// certificate or key is ErrNoPKI; a subdirectory it cannot read is a
// problem.
func (st Store) stems() ([]string, Problems, error) {
	if fi, err := os.Stat(st.Dir); err != nil || !fi.IsDir() {
		return nil, nil, fmt.Errorf("%s: %w", st.Dir, ErrNoPKI)
	}
	var stems []string
	var ps Problems
	anything := false
	err := filepath.WalkDir(st.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			ps.add(Problem{path, unwrapPath(err).Error()})
			return nil
		}
		rel, _ := filepath.Rel(st.Dir, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && rel == "backup" {
			return filepath.SkipDir
		}
		if !d.IsDir() && pathpkg.Dir(rel) == nodesDir {
			ps.add(Problem{path, fileForDir})
		}
		ext := filepath.Ext(rel)
		switch ext {
		case ".crt", ".key":
			stems = append(stems, strings.TrimSuffix(rel, ext))
			anything = true
		case ".pub":
			anything = true
		}
		if d.IsDir() && (ext == ".crt" || ext == ".key") {
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("reading the PKI in %s: %w", st.Dir, err)
	}
	if !anything && len(ps) == 0 {
		return nil, nil, fmt.Errorf("%s: %w", st.Dir, ErrNoPKI)
	}
	return stems, ps, nil
}

// Renew re-issues, under the same CAs, every leaf certificate of the site
// that expires within the given time: a new key and certificate with the
// site's current names and lifetime. The old pair is copied to
// backup/<time>/ first. CAs are not renewed here. It returns the renewed
// stems.
func (st Store) Renew(s *site.Site, within time.Duration) ([]string, error) {
	now := st.now()
	return st.renew(s, Leaves(s), func(c *x509.Certificate) bool { return c.NotAfter.Sub(now) <= within })
}

// ErrUnknownNode is RenewNode's answer for a name the site does not give.
var ErrUnknownNode = errors.New("no such node in the site")

// RenewNode re-issues every certificate of the node (NodeLeaves) now,
// whatever its expiry, as Renew does: new keys, the old pairs copied to
// backup/<time>/ first. A node whose certificates may be in other hands
// (one removed, or whose machine or config was stolen) gets credentials
// that never were there. It returns the renewed stems; a certificate not
// issued yet is left to kiln gen.
func (st Store) RenewNode(s *site.Site, node string) ([]string, error) {
	for _, n := range s.Nodes {
		if n.Name == node {
			return st.renew(s, NodeLeaves(s, n), func(*x509.Certificate) bool { return true })
		}
	}
	return nil, fmt.Errorf("%s: %w file %s", node, ErrUnknownNode, s.File)
}

// renew re-issues the leaves whose certificate is due, each after
// copying its pair to one backup directory.
func (st Store) renew(s *site.Site, leaves []Leaf, due func(*x509.Certificate) bool) ([]string, error) {
	var renewed []string
	var backup string
	for _, l := range leaves {
		e, ok, ps := st.read(l.Stem)
		if len(ps) > 0 {
			return renewed, ps
		}
		if !ok || !due(e.cert) {
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
