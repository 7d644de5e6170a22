package etcdrestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/kiln-project/kiln/contract/etcdsnapshot"
)

// contents is what the restore reads of a snapshot before it writes
// anything: its latest revision and the cluster it names (nil: none).
type contents struct {
	Revision int64
	Identity *etcdsnapshot.Identity
}

// keyBucket is etcd's bucket of key revisions (server/storage/schema):
// keys are revisions (8-byte main, '_', 8-byte sub, and a trailing 't'
// on a deletion), values mvccpb.KeyValue protobufs.
var keyBucket = []byte("key")

// revisionBytes and tombstoneBytes are the lengths of a revision key
// and of a deletion's (storage/mvcc/revision.go).
const (
	revisionBytes  = 17
	tombstoneBytes = revisionBytes + 1
)

// readContents opens the snapshot's bolt database read-only and reads
// its latest revision and the kiln-cluster ConfigMap's last version.
func readContents(path string) (contents, error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return contents{}, fmt.Errorf("opening %s as etcd's database: %w", path, err)
	}
	defer db.Close()
	var c contents
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(keyBucket)
		if b == nil {
			return errors.New("no key bucket: not an etcd v3 database")
		}
		var last []byte // the ConfigMap's newest value; nil when deleted
		var found bool
		err := b.ForEach(func(k, v []byte) error {
			if len(k) != revisionBytes && len(k) != tombstoneBytes {
				return fmt.Errorf("key %x is not a revision", k)
			}
			c.Revision = max(c.Revision, int64(binary.BigEndian.Uint64(k[:8])))
			var kv mvccpb.KeyValue
			if err := kv.Unmarshal(v); err != nil {
				return fmt.Errorf("revision %d: %w", binary.BigEndian.Uint64(k[:8]), err)
			}
			if string(kv.Key) != etcdsnapshot.IdentityEtcdKey {
				return nil
			}
			found = true
			last = nil
			if len(k) == revisionBytes {
				last = append([]byte(nil), kv.Value...)
			}
			return nil
		})
		if err != nil || !found || last == nil {
			return err
		}
		id, err := decodeIdentity(last)
		if err != nil {
			return fmt.Errorf("%s: %w", etcdsnapshot.IdentityEtcdKey, err)
		}
		c.Identity = &id
		return nil
	})
	if err != nil {
		return contents{}, fmt.Errorf("reading %s: %w", path, err)
	}
	return c, nil
}

// decodeIdentity decodes the ConfigMap as the apiserver stores it
// (Kubernetes protobuf; JSON from an apiserver told to store JSON).
func decodeIdentity(value []byte) (etcdsnapshot.Identity, error) {
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(value, nil, nil)
	if err != nil {
		return etcdsnapshot.Identity{}, err
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return etcdsnapshot.Identity{}, fmt.Errorf("holds a %T, not a ConfigMap", obj)
	}
	return etcdsnapshot.IdentityFromData(cm.Data), nil
}
