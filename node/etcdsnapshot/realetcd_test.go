package etcdsnapshot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kiln-project/kiln/builder/realbin"
	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/freeport"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/node/etcdmember"
	"github.com/kiln-project/kiln/ops/nodeops"
)

const testSite = `apiVersion: kiln.dev/v1alpha1
kind: Site
cluster: {name: t, kubernetesVersion: v1.37.1, podCIDR: 10.244.0.0/16, serviceCIDR: 10.96.0.0/12}
nodes:
  - {name: g1, role: genesis, macs: ["52:54:00:00:00:01"], installDisk: /dev/vda, network: {address: 10.0.2.50/24, gateway: 10.0.2.2}}
`

// The image's etcd (from the component cache make image fills) with the
// genesis node's certificates from a fresh PKI: keys written, then
// snapshots taken through the client API as a master's timer and the
// operator's kiln etcd snapshot take them, verified, pruned, and a
// truncated copy refused.
func TestSnapshotsOfARealEtcd(t *testing.T) {
	if os.Getenv("KILN_INTEGRATION") != "1" {
		t.Skip("set KILN_INTEGRATION=1 (make integration) to run etcd on the host")
	}
	member, kv, endpoint := startEtcd(t)
	ctx := context.Background()
	for i := range 200 {
		if _, err := kv.Put(ctx, fmt.Sprintf("/registry/test/%03d", i), fmt.Sprintf("value %d", i)); err != nil {
			t.Fatal(err)
		}
	}

	dir := filepath.Join(t.TempDir(), "etcd-snapshots")
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	d := Dir{Path: dir, Keep: 2, Disk: StatFS{}, Now: func() time.Time { now = now.Add(time.Hour); return now }, Log: t.Logf}
	var taken []Snapshot
	for range 3 {
		snap, err := d.Take(ctx, member.Maintenance(), endpoint)
		if errors.Is(err, ErrSkipped) {
			t.Skipf("the test's filesystem is too full for the space rule: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("took %s: %d bytes, revision %d, etcd %s, sha256 %s", filepath.Base(snap.Path), snap.Size, snap.Revision, snap.Version, snap.SHA256)
		if snap.Revision < 200 || snap.Version != "3.6.0" {
			t.Errorf("snapshot %+v: want the revision of the 200 writes and storage version 3.6.0", snap)
		}
		taken = append(taken, snap)
		kv.Put(ctx, "/registry/test/more", snap.Path)
	}
	var want []string
	for _, s := range taken[1:] {
		want = append(want, filepath.Base(s.Path))
	}
	if got := dirNames(t, dir); !slices.Equal(got, want) {
		t.Errorf("after three snapshots with keep 2 the directory holds %v, want %v", got, want)
	}

	out := filepath.Join(t.TempDir(), "backup.db")
	snap, err := Pull(ctx, []Source{{Name: "g1", Endpoint: endpoint, Member: member.Maintenance()}}, out, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := Verify(out); err != nil || v.SHA256 != snap.SHA256 {
		t.Fatalf("Verify of the pulled snapshot = %+v, %v", v, err)
	}
	if _, err := Pull(ctx, []Source{{Name: "g1", Endpoint: endpoint, Member: member.Maintenance()}}, out, t.Logf); !errors.Is(err, ErrExists) {
		t.Errorf("a second pull to the same path: %v, want ErrExists", err)
	}

	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(t.TempDir(), "truncated.db")
	os.WriteFile(truncated, data[:len(data)/2], 0o600)
	if _, err := Verify(truncated); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Verify of a snapshot cut in half: %v, want ErrCorrupt", err)
	}
}

// startEtcd starts the image's etcd as the genesis node g1 with its
// certificates, its clients on 127.0.0.1, and returns a client of it
// with the apiserver's etcd client certificate as the commands make it,
// a plain one for the test's writes, and its endpoint, once it serves.
func startEtcd(t *testing.T) (*etcdmember.Client, clientv3.KV, string) {
	t.Helper()
	s, err := site.Parse("site.yaml", []byte(testSite))
	if err != nil {
		t.Fatal(err)
	}
	st := pki.Store{Dir: filepath.Join(t.TempDir(), "pki")}
	if _, err := st.Ensure(s); err != nil {
		t.Fatal(err)
	}
	clientPort, peerPort := port(t), port(t)
	endpoint := fmt.Sprintf("https://127.0.0.1:%d", clientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	pkiFile := func(f string) string { return filepath.Join(st.Dir, f) }
	realbin.Start(t, "etcd", realbin.Etcd(t), "--name", "g1", "--data-dir", filepath.Join(t.TempDir(), "etcd"),
		"--listen-client-urls", endpoint, "--advertise-client-urls", endpoint,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "g1="+peer,
		"--listen-metrics-urls", "http://127.0.0.1:0",
		"--cert-file", pkiFile("nodes/g1/etcd-server.crt"), "--key-file", pkiFile("nodes/g1/etcd-server.key"),
		"--trusted-ca-file", pkiFile("etcd/ca.crt"), "--client-cert-auth")
	cfg, err := nodeops.EtcdTLS(st)
	if err != nil {
		t.Fatal(err)
	}
	c, err := etcdmember.Dial([]string{endpoint}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	serving := func(ctx context.Context) error { return c.Healthy(ctx, endpoint) }
	if err := retry.Wait(context.Background(), "etcd serving", time.Minute, t.Logf, serving); err != nil {
		t.Fatal(err)
	}
	kv, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: cfg, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kv.Close() })
	return c, kv, endpoint
}

func port(t *testing.T) int {
	t.Helper()
	p, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
