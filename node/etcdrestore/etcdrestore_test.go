package etcdrestore

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/kiln-project/kiln/contract/etcdsnapshot"
)

func TestDecide(t *testing.T) {
	const sum = "aa"
	for _, tc := range []struct {
		name    string
		hasData bool
		rec     *Record
		want    Action
	}{
		{"a blank data directory", false, nil, Restore},
		{"a restore cut short before its rename", false, &Record{SnapshotSHA256: sum}, Restore},
		{"a restore cut short after its rename", true, &Record{SnapshotSHA256: sum}, Finished},
		{"data no restore wrote", true, nil, Refuse},
		{"data another snapshot's restore wrote", true, &Record{SnapshotSHA256: "bb"}, Refuse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(tc.hasData, tc.rec, sum); got != tc.want {
				t.Errorf("Decide = %v, want %v", got, tc.want)
			}
		})
	}
}

// revKey is etcd's key of revision main (sub 0), a deletion's when
// tombstone.
func revKey(main int64, tombstone bool) []byte {
	k := make([]byte, 17, 18)
	binary.BigEndian.PutUint64(k, uint64(main))
	k[8] = '_'
	if tombstone {
		k = append(k, 't')
	}
	return k
}

// fakeSnapshot writes a bolt database shaped like etcd's (bucket key,
// KeyValue protobufs) holding puts at revisions 1.., then the SHA-256
// trailer of a snapshot saved through the API; it returns the path and
// the file's SHA-256.
func fakeSnapshot(t *testing.T, puts []*mvccpb.KeyValue, deleteLast bool) (string, string) {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "db")
	db, err := bolt.Open(p, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket(keyBucket)
		if err != nil {
			return err
		}
		for i, kv := range puts {
			v, _ := kv.Marshal()
			tomb := deleteLast && i == len(puts)-1
			if err := b.Put(revKey(int64(i+1), tomb), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	data = append(data, sum[:]...)
	snap := filepath.Join(dir, "snapshot.db")
	if err := os.WriteFile(snap, data, 0o600); err != nil {
		t.Fatal(err)
	}
	whole := sha256.Sum256(data)
	return snap, hex.EncodeToString(whole[:])
}

func identityKV(t *testing.T, id etcdsnapshot.Identity) *mvccpb.KeyValue {
	t.Helper()
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: etcdsnapshot.IdentityName, Namespace: etcdsnapshot.IdentityNamespace},
		Data:       id.Data()}
	var b bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(cm, &b); err != nil {
		t.Fatal(err)
	}
	return &mvccpb.KeyValue{Key: []byte(etcdsnapshot.IdentityEtcdKey), Value: b.Bytes()}
}

// check refuses, before anything is written, a snapshot that fails its
// hash or whose cluster is not the node's; it reads the latest revision.
func TestCheck(t *testing.T) {
	ours := etcdsnapshot.IdentityOf("lab", []byte("our CA"))
	other := etcdsnapshot.IdentityOf("lab", []byte("their CA"))
	plain := &mvccpb.KeyValue{Key: []byte("/registry/x"), Value: []byte("v")}
	for _, tc := range []struct {
		name         string
		puts         []*mvccpb.KeyValue
		deleteLast   bool
		allowUnknown bool
		damage       bool
		wantErr      string // "" for accepted
	}{
		{"this cluster's", []*mvccpb.KeyValue{plain, identityKV(t, ours), plain}, false, false, false, ""},
		{"renamed to this cluster's last", []*mvccpb.KeyValue{identityKV(t, other), identityKV(t, ours)}, false, false, false, ""},
		{"another CA's", []*mvccpb.KeyValue{identityKV(t, other), plain}, false, false, false, "Kubernetes CA with SHA-256 " + other.CASHA256},
		{"another cluster name's", []*mvccpb.KeyValue{identityKV(t, etcdsnapshot.Identity{Cluster: "prod", CASHA256: ours.CASHA256})}, false, false, false, `of cluster "prod", this node's cluster is "lab"`},
		{"no identity", []*mvccpb.KeyValue{plain}, false, false, false, "allowUnknownCluster: true"},
		{"its identity deleted", []*mvccpb.KeyValue{identityKV(t, ours), identityKV(t, ours)}, true, false, false, "holds no kube-system/kiln-cluster"},
		{"no identity, allowed", []*mvccpb.KeyValue{plain}, false, true, false, ""},
		{"truncated", []*mvccpb.KeyValue{identityKV(t, ours)}, false, false, true, "integrity check failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, sum := fakeSnapshot(t, tc.puts, tc.deleteLast)
			if tc.damage {
				data, _ := os.ReadFile(path)
				os.WriteFile(path, data[:len(data)-100], 0o600)
			}
			c, err := check(Request{Root: "/", Snapshot: path, SHA256: sum, Cluster: ours, AllowUnknownCluster: tc.allowUnknown})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.Revision != int64(len(tc.puts)) {
					t.Errorf("revision %d, want %d", c.Revision, len(tc.puts))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to say %q", err, tc.wantErr)
			}
		})
	}
}

// A snapshot whose file is not the one the node file names is refused
// as failing its hash, and Run writes nothing.
func TestRunRefusesBeforeWriting(t *testing.T) {
	path, _ := fakeSnapshot(t, []*mvccpb.KeyValue{{Key: []byte("k"), Value: []byte("v")}}, false)
	root := t.TempDir()
	data, _ := os.ReadFile(path)
	if err := os.WriteFile(filepath.Join(root, "snapshot.db"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, action, err := Run(Request{Root: root, Snapshot: "/snapshot.db", SHA256: strings.Repeat("0", 64), DataDir: "/var/lib/etcd",
		Name: "g1", PeerURL: "https://10.0.0.2:2380", AllowUnknownCluster: true})
	if action != Refuse || !errors.Is(err, etcdsnapshot.ErrIntegrity) {
		t.Fatalf("Run = %v, %v; want a refusal for its hash", action, err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 1 {
		t.Errorf("a refused restore wrote beside the snapshot: %v", entries)
	}
}
