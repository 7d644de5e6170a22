package role

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/builder/realbin"
	"github.com/kiln-project/kiln/contract/etcdsnapshot"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/etcdmember"
	"github.com/kiln-project/kiln/node/etcdrestore"
)

// The genesis node restores only while its node file names a snapshot
// and neither a bootstrap nor a restore is stamped.
func TestRestoringOnlyOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restore bool
		stamps  []string
		want    bool
	}{
		{"no snapshot named", false, nil, false},
		{"a blank genesis node", true, nil, true},
		{"restored on an earlier boot", true, []string{restoredStamp}, false},
		{"bootstrapped on an earlier boot", true, []string{"genesis/bootstrap"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			f := &nodefile.NodeFile{Name: "g1", Role: nodefile.RoleGenesis}
			if tc.restore {
				f.Restore = &nodefile.Restore{Path: etcdsnapshot.Path, SHA256: "00"}
			}
			for _, s := range tc.stamps {
				if err := stampFiles(filepath.Join(root, StampDir)).Mark(s); err != nil {
					t.Fatal(err)
				}
			}
			env := nodeEnv{root: root, file: f}
			if got := env.restoring(); got != tc.want {
				t.Errorf("restoring() = %v, want %v", got, tc.want)
			}
		})
	}
}

// Against a real etcd and kube-apiserver: the cluster records its
// identity, a snapshot is taken through the API, more is written, and
// the restore (refusing another cluster's first) makes a data directory
// a real etcd starts on, with initial-cluster-state new as a genesis
// node's configuration says: the snapshot's keys and not the later
// ones, revisions past the old ones plus the bump, old revisions
// compacted (a watch from one gets ErrCompacted from etcd and 410 Gone
// from an apiserver on it), new member and cluster IDs.
func TestRestoreOnARealEtcd(t *testing.T) {
	cp := startRealControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	n := cp.node
	n.APIAt, n.Wait, n.u = func(string) (kubernetes.Interface, error) { return cp.cluster.kube, nil }, time.Minute, nil
	if err := n.units().plane.recordIdentity(ctx); err != nil {
		t.Fatal(err)
	}
	kube := cp.cluster.kube
	early := configMap(t, ctx, kube, "early")
	etcd := etcdClient(t, cp.root, cp.etcdPort)
	mustPut(t, ctx, etcd, "/kiln-test/early")
	before, err := etcd.Status(ctx, etcd.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}

	snap := filepath.Join(t.TempDir(), "snapshot.db")
	if _, err := snapshot.SaveWithVersion(ctx, zap.NewNop(), etcdConfig(t, cp.root, cp.etcdPort), snap); err != nil {
		t.Fatal(err)
	}
	snapRev := before.Header.Revision
	configMap(t, ctx, kube, "late")
	mustPut(t, ctx, etcd, "/kiln-test/late")
	last, err := etcd.Status(ctx, etcd.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}

	restored, peerURL := restoreInto(t, cp, snap)
	port := freePort(t)
	pki := func(f string) string { return filepath.Join(cp.root, nodefile.PKIDir, f) }
	realbin.Start(t, "etcd-restored", cp.bins["etcd"], "--name", "g1", "--data-dir", filepath.Join(restored, manifests.EtcdDataDir),
		"--listen-client-urls", fmt.Sprintf("https://127.0.0.1:%d", port), "--advertise-client-urls", fmt.Sprintf("https://127.0.0.1:%d", port),
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "g1="+peerURL, "--initial-cluster-state", etcdmember.StateNew, "--listen-metrics-urls", "http://127.0.0.1:0",
		"--cert-file", pki("etcd-server.crt"), "--key-file", pki("etcd-server.key"), "--trusted-ca-file", pki("etcd/ca.crt"), "--client-cert-auth")
	after := etcdClient(t, cp.root, port)
	var status *clientv3.StatusResponse
	err = retry.Wait(ctx, "restored etcd serving", time.Minute, t.Logf, func(ctx context.Context) error {
		status, err = after.Status(ctx, after.Endpoints()[0])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	for key, want := range map[string]int{"/kiln-test/early": 1, "/kiln-test/late": 0} {
		got, err := after.Get(ctx, key)
		if err != nil || len(got.Kvs) != want {
			t.Errorf("%s: %d keys (%v), want %d", key, len(got.Kvs), err, want)
		}
	}
	if status.Header.Revision < snapRev+etcdrestore.RevisionBump || status.Header.Revision <= last.Header.Revision {
		t.Errorf("revision %d after the restore: want at least %d (the snapshot's %d plus the bump), above the lost cluster's %d",
			status.Header.Revision, snapRev+etcdrestore.RevisionBump, snapRev, last.Header.Revision)
	}
	if status.Header.MemberId == before.Header.MemberId || status.Header.ClusterId == before.Header.ClusterId {
		t.Errorf("member %x of cluster %x: the same IDs as the original's %x of %x", status.Header.MemberId, status.Header.ClusterId, before.Header.MemberId, before.Header.ClusterId)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	w := <-after.Watch(wctx, "/kiln-test/", clientv3.WithPrefix(), clientv3.WithRev(snapRev))
	if !errors.Is(w.Err(), rpctypes.ErrCompacted) {
		t.Errorf("a watch from revision %d: %v, want %v", snapRev, w.Err(), rpctypes.ErrCompacted)
	}

	_, _, c := startRealAPIServer(t, cp.root, n, cp.bins, port)
	watchGone(t, ctx, c.kube, early.ResourceVersion)
	if _, err := c.kube.CoreV1().ConfigMaps("default").Get(ctx, "kiln-test-late", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ConfigMap written after the snapshot: %v, want NotFound", err)
	}
}

// restoreInto restores the snapshot as a genesis node does, under a new
// root, after checking that another cluster's is refused there with
// nothing written; it returns the root and the member's peer URL.
func restoreInto(t *testing.T, cp *realControlPlane, snap string) (string, string) {
	t.Helper()
	root := t.TempDir()
	data, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(etcdsnapshot.Path)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, etcdsnapshot.Path), data, 0o600); err != nil {
		t.Fatal(err)
	}
	sum, err := etcdsnapshot.Check(snap)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(cp.root, nodefile.PKIDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	req := etcdrestore.Request{Root: root, Snapshot: etcdsnapshot.Path, SHA256: sum, DataDir: manifests.EtcdDataDir,
		Name: "g1", PeerURL: peerURL, Cluster: etcdsnapshot.IdentityOf("another", ca)}
	if _, action, err := etcdrestore.Run(req); action != etcdrestore.Refuse || !errors.Is(err, etcdrestore.ErrForeign) {
		t.Fatalf("restoring another cluster's snapshot: %v, %v; want a refusal", action, err)
	}
	if _, err := os.Stat(filepath.Join(root, manifests.EtcdDataDir)); !os.IsNotExist(err) {
		t.Fatalf("a refused restore wrote %s (%v)", manifests.EtcdDataDir, err)
	}
	req.Cluster = etcdsnapshot.IdentityOf(cp.node.file.Cluster.Name, ca)
	rec, action, err := etcdrestore.Run(req)
	if err != nil || action != etcdrestore.Restore {
		t.Fatalf("restore: %v, %v", action, err)
	}
	t.Logf("restored revision %d, bumped to %d", rec.Revision, rec.BumpedTo)
	// A boot cut short before the restore was stamped finds its data.
	if again, action, err := etcdrestore.Run(req); action != etcdrestore.Finished || err != nil || again != rec {
		t.Errorf("the restore run again over its own data: %v, %+v, %v; want it finished, as recorded", action, again, err)
	}
	return root, peerURL
}

func configMap(t *testing.T, ctx context.Context, kube kubernetes.Interface, name string) *corev1.ConfigMap {
	t.Helper()
	cm, err := kube.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kiln-test-" + name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

// watchGone checks that a watch of ConfigMaps from a resourceVersion
// of the lost cluster ends in 410 Gone: informers list again.
func watchGone(t *testing.T, ctx context.Context, kube kubernetes.Interface, rv string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w, err := kube.CoreV1().ConfigMaps("default").Watch(wctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		if !apierrors.IsGone(err) && !apierrors.IsResourceExpired(err) {
			t.Errorf("a watch from resourceVersion %s: %v, want 410 Gone", rv, err)
		}
		return
	}
	defer w.Stop()
	ev, ok := <-w.ResultChan()
	if !ok || ev.Type != watch.Error {
		t.Errorf("a watch from resourceVersion %s: event %v (open %v), want an error (410 Gone)", rv, ev.Type, ok)
		return
	}
	if st, isStatus := ev.Object.(*metav1.Status); !isStatus || st.Code != 410 {
		t.Errorf("a watch from resourceVersion %s: %+v, want 410 Gone", rv, ev.Object)
	}
}

func etcdConfig(t *testing.T, root string, port int) clientv3.Config {
	t.Helper()
	tlsCfg, err := etcdmember.ReadClientTLS(filepath.Join(root, nodefile.PKIDir))
	if err != nil {
		t.Fatal(err)
	}
	return clientv3.Config{Endpoints: []string{fmt.Sprintf("https://127.0.0.1:%d", port)}, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
}

func etcdClient(t *testing.T, root string, port int) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(etcdConfig(t, root, port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func mustPut(t *testing.T, ctx context.Context, c *clientv3.Client, key string) {
	t.Helper()
	if _, err := c.Put(ctx, key, "v"); err != nil {
		t.Fatal(err)
	}
}
