// Package etcdsnapshot owns what kiln gen and the genesis node share
// about restoring a cluster from an etcd snapshot: where the snapshot
// lands on the node, how its integrity hash is checked, and the
// ConfigMap that names the cluster a snapshot was taken from. It
// imports nothing from etcd, so kiln gen checks a snapshot without
// etcd's server packages.
package etcdsnapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
)

// Path is where the genesis node's config puts the snapshot it restores
// from, on the state partition (0600: a snapshot holds the cluster's
// objects).
const Path = "/var/lib/kiln/restore/snapshot.db"

// The cluster identity: a ConfigMap the genesis node writes once its
// cluster is bootstrapped, which every snapshot taken afterwards holds.
// A restore compares it with the node's own cluster name and Kubernetes
// CA before it writes anything.
const (
	IdentityNamespace  = "kube-system"
	IdentityName       = "kiln-cluster"
	IdentityClusterKey = "cluster"
	// IdentityCAKey holds the SHA-256, in hex, of the Kubernetes CA
	// certificate (PEM, as kiln gen writes ca.crt).
	IdentityCAKey = "caSHA256"
	// IdentityEtcdKey is the ConfigMap's key in etcd, as the apiserver
	// stores it under its default prefix.
	IdentityEtcdKey = "/registry/configmaps/" + IdentityNamespace + "/" + IdentityName
)

// Identity is the cluster a snapshot comes from, or a node belongs to.
type Identity struct {
	Cluster  string
	CASHA256 string
}

// IdentityOf is the identity of cluster with the Kubernetes CA
// certificate caPEM.
func IdentityOf(cluster string, caPEM []byte) Identity {
	sum := sha256.Sum256(caPEM)
	return Identity{Cluster: cluster, CASHA256: hex.EncodeToString(sum[:])}
}

// Data is the identity as the ConfigMap's data.
func (i Identity) Data() map[string]string {
	return map[string]string{IdentityClusterKey: i.Cluster, IdentityCAKey: i.CASHA256}
}

// IdentityFromData reads the ConfigMap's data.
func IdentityFromData(d map[string]string) Identity {
	return Identity{Cluster: d[IdentityClusterKey], CASHA256: d[IdentityCAKey]}
}

// ErrIntegrity is a snapshot whose integrity hash is missing or does
// not match: truncated, corrupted, or copied from a member's data
// directory instead of taken through etcd's API.
var ErrIntegrity = errors.New("etcd snapshot integrity check failed")

// hashAligned reports whether size is a bolt database (whole 512-byte
// blocks) with etcd's 32-byte SHA-256 after it, as etcdutl tells a
// snapshot taken through the API (hasChecksum in etcdutl/snapshot).
func hashAligned(size int64) bool { return size%512 == sha256.Size }

// Check verifies the snapshot at path: a snapshot taken through etcd's
// API (etcdctl or kiln etcd snapshot save) ends with the SHA-256 of
// everything before it. It returns the SHA-256 of the whole file, which
// Ignition verifies and the node file records.
func Check(path string) (fileSHA256 string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	return check(f, fi.Size(), path)
}

// CheckReader is Check on a stream of size bytes, named name in errors.
func CheckReader(r io.Reader, size int64, name string) (string, error) {
	return check(r, size, name)
}

func check(r io.Reader, size int64, name string) (string, error) {
	if size < 512+sha256.Size || !hashAligned(size) {
		return "", fmt.Errorf("%s: %w: %d bytes is not a bolt database followed by a 32-byte SHA-256 "+
			"(truncated, or not a snapshot saved through etcd's API)", name, ErrIntegrity, size)
	}
	body, whole := sha256.New(), sha256.New()
	if _, err := io.CopyN(io.MultiWriter(body, whole), r, size-sha256.Size); err != nil {
		return "", fmt.Errorf("reading %s: %w", name, err)
	}
	trailer := make([]byte, sha256.Size)
	if _, err := io.ReadFull(r, trailer); err != nil {
		return "", fmt.Errorf("reading %s: %w", name, err)
	}
	whole.Write(trailer)
	if got := body.Sum(nil); !bytes.Equal(got, trailer) {
		return "", fmt.Errorf("%s: %w: its contents hash to %x, its trailer says %x (truncated or corrupted)", name, ErrIntegrity, got[:8], trailer[:8])
	}
	return hex.EncodeToString(whole.Sum(nil)), nil
}
