package site

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/kiln-project/kiln/contract/etcdsnapshot"
	"github.com/kiln-project/kiln/internal/validation"
)

// RestoreFrom is the etcd snapshot a lost cluster is restored from: a
// File on the operator's machine (relative to the site file's
// directory), which kiln gen checks and embeds in the genesis node's
// config, or a URL the genesis node fetches, with the SHA-256 it must
// have. Either way only the genesis node's config carries it.
type RestoreFrom struct {
	File   string `json:"file,omitempty"`
	URL    string `json:"url,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// AllowUnknownCluster restores a snapshot that does not say which
	// cluster it comes from (taken before kiln recorded that in etcd).
	AllowUnknownCluster bool `json:"allowUnknownCluster,omitempty"`

	// Snapshot is File's contents, read and checked by Load.
	Snapshot []byte `json:"-"`
}

// MaxSnapshot bounds a snapshot kiln gen embeds: the agent holds a
// config's contents in memory, each at most 256 MiB decompressed
// (firstboot/ignite).
const MaxSnapshot = 256 << 20

// validateRestoreFrom checks cluster.restoreFrom and reads the snapshot
// File names; afterwards SHA256 is the file's hash either way.
func (s *Site) validateRestoreFrom(l *validation.List, p validation.Path) {
	r := s.Cluster.RestoreFrom
	if r == nil {
		return
	}
	switch {
	case r.File == "" && r.URL == "":
		l.Addf(p.String(), "names no snapshot: give file (a snapshot on this machine) or url with sha256")
	case r.File != "" && r.URL != "":
		l.Addf(p.String(), "gives both file and url: name the snapshot one way")
	case r.File != "":
		s.readSnapshot(l, p, r)
	default:
		validateSnapshotURL(l, p, r)
	}
}

// readSnapshot reads and checks a snapshot file: nothing but a whole
// snapshot saved through etcd's API, with its integrity hash, reaches a
// node.
func (s *Site) readSnapshot(l *validation.List, p validation.Path, r *RestoreFrom) {
	fp := p.Field("file").String()
	path := s.resolve(r.File)
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		l.Addf(fp, "cannot read %s: %v", path, withoutPath(err))
		return
	case fi.IsDir():
		l.Addf(fp, "%s is a directory, not an etcd snapshot", path)
		return
	case fi.Size() > MaxSnapshot:
		l.Addf(fp, "%s is larger than %d MiB, the most a node's config may carry: serve it over https and give url and sha256", path, MaxSnapshot>>20)
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		l.Addf(fp, "cannot read %s: %v", path, withoutPath(err))
		return
	}
	sum, err := etcdsnapshot.CheckReader(bytes.NewReader(data), int64(len(data)), path)
	if err != nil {
		l.Addf(fp, "%v", err)
		return
	}
	if r.SHA256 != "" && !strings.EqualFold(r.SHA256, sum) {
		l.Addf(p.Field("sha256").String(), "%s has SHA-256 %s, not %s", path, sum, r.SHA256)
		return
	}
	r.SHA256, r.Snapshot = sum, data
}

// validateSnapshotURL checks a snapshot the node fetches: over http or
// https, always with its SHA-256, which the node's agent verifies before
// it writes the file.
func validateSnapshotURL(l *validation.List, p validation.Path, r *RestoreFrom) {
	up := p.Field("url").String()
	u, err := url.Parse(r.URL)
	switch {
	case err != nil:
		l.Addf(up, "not a URL")
	case u.Scheme != "https" && u.Scheme != "http":
		l.Addf(up, "%s is not an https:// (or http://) URL", r.URL)
	case u.Host == "":
		l.Addf(up, "%s names no host", r.URL)
	case u.User != nil:
		l.Addf(up, "holds a user name or password, which would be in the node's config and on its console")
	}
	sp := p.Field("sha256").String()
	if r.SHA256 == "" {
		l.Addf(sp, "required with url: the snapshot's SHA-256 (sha256sum), which the node checks before it writes the file")
	} else if b, err := hex.DecodeString(r.SHA256); err != nil || len(b) != 32 {
		l.Addf(sp, "must be 64 hex digits (sha256sum's output), got %q", r.SHA256)
	} else {
		r.SHA256 = strings.ToLower(r.SHA256)
	}
}

// String names the snapshot, never its bytes: a site printed in a
// message would otherwise carry the whole snapshot.
func (r RestoreFrom) String() string {
	if r.File != "" {
		return fmt.Sprintf("file %s", r.File)
	}
	return fmt.Sprintf("url %s", r.URL)
}
