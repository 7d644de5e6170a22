package pki

import (
	"errors"
	"testing"
	"time"

	"github.com/kiln-project/kiln/gen/site"
)

// Check finds every kind of problem, each once, naming its file, and
// every one of them in one run.
func TestCheckFindsEveryProblem(t *testing.T) {
	year := 8760 * time.Hour
	for _, tc := range []struct {
		name     string
		withSite bool
		spoil    func(t *testing.T, st Store, s *site.Site)
		want     []want
	}{
		{"nothing wrong", true, func(*testing.T, Store, *site.Site) {}, nil},
		{"a key that is another's", false, func(t *testing.T, st Store, _ *site.Site) {
			copyFile(t, st, "nodes/w2/kubelet-client.key", "nodes/w1/kubelet-client.key")
		}, []want{{"nodes/w1/kubelet-client.key", "does not belong to"}}},
		{"a missing key", false, func(t *testing.T, st Store, _ *site.Site) { remove(t, st, "nodes/w1/kubelet-server.key") },
			[]want{{"nodes/w1/kubelet-server.key", "missing, while"}}},
		{"a missing certificate", false, func(t *testing.T, st Store, _ *site.Site) { remove(t, st, "scheduler.crt") },
			[]want{{"scheduler.crt", "missing, while"}}},
		{"a missing CA key", false, func(t *testing.T, st Store, _ *site.Site) { remove(t, st, "etcd/ca.key") },
			[]want{{"etcd/ca.key", "kiln never re-issues a CA"}}},
		{"a missing CA", false, func(t *testing.T, st Store, _ *site.Site) { remove(t, st, "ca.crt"); remove(t, st, "ca.key") },
			[]want{{"ca.crt", "missing: kiln never re-issues a CA"}}},
		{"a missing encryption key", false, func(t *testing.T, st Store, _ *site.Site) { remove(t, st, "encryption-key.b64") },
			[]want{{"encryption-key.b64", "missing: kiln gen creates it"}}},
		{"a short encryption key", false, func(t *testing.T, st Store, _ *site.Site) {
			writeFile(t, st, "encryption-key.b64", []byte("c2hvcnQ=\n"))
		},
			[]want{{"encryption-key.b64", "not 32 bytes in base64"}}},
		{"a missing sa.key", false, func(t *testing.T, st Store, _ *site.Site) { remove(t, st, "sa.key") },
			[]want{{"sa.key", "missing, while"}}},
		{"garbage sa.key", false, func(t *testing.T, st Store, _ *site.Site) { writeFile(t, st, "sa.key", []byte("garbage")) },
			[]want{{"sa.key", "not a PEM private key"}}},
		{"a missing sa.pub", false, func(t *testing.T, st Store, _ *site.Site) { remove(t, st, "sa.pub") },
			[]want{{"sa.pub", "missing, while"}}},
		{"garbage sa.pub", false, func(t *testing.T, st Store, _ *site.Site) { writeFile(t, st, "sa.pub", []byte("garbage")) },
			[]want{{"sa.pub", "not a PEM public key"}}},
		{"sa.pub of another key", false, func(t *testing.T, st Store, _ *site.Site) { writeFile(t, st, "sa.pub", otherPublicKey(t)) },
			[]want{{"sa.pub", "not the public half of"}}},
		{"a leaf of a foreign CA", false, func(t *testing.T, st Store, s *site.Site) {
			putPair(t, st, "nodes/m1/etcd-peer", foreignPair(t, s, "nodes/m1/etcd-peer"))
		}, []want{{"nodes/m1/etcd-peer.crt", "which is none of the CAs in"}}},
		{"a leaf of a foreign CA, against the site", true, func(t *testing.T, st Store, s *site.Site) {
			putPair(t, st, "nodes/m1/etcd-peer", foreignPair(t, s, "nodes/m1/etcd-peer"))
		}, []want{{"nodes/m1/etcd-peer.crt", "signed by another key than etcd/ca.crt's"}}},
		{"an expired leaf", false, func(t *testing.T, st Store, s *site.Site) {
			issueAt(t, st, leafOf(t, s, "admin"), year, time.Now().Add(-2*year))
		}, []want{{"admin.crt", "expired on"}}},
		{"a leaf inside its renew window", false, func(t *testing.T, st Store, s *site.Site) {
			issueAt(t, st, leafOf(t, s, "scheduler"), year, time.Now().Add(-year+10*24*time.Hour))
		}, []want{{"scheduler.crt", "within the renew window of 30d"}}},
		{"an expired CA", false, func(t *testing.T, st Store, _ *site.Site) { expiredCA(t, st, FrontProxyCA) },
			[]want{{"front-proxy-ca.crt", "the CA expired on"}, {"front-proxy-client.crt", "which is none of the CAs in"}}},
		{"SANs drift: a master re-addressed", true, func(t *testing.T, st Store, s *site.Site) {
			s.Nodes[1].Network.Address = "192.168.10.14/24"
		}, []want{
			{"nodes/m1/apiserver.crt", "lacks 192.168.10.14"}, {"nodes/m2/apiserver.crt", "lacks 192.168.10.14"},
			{"nodes/m3/apiserver.crt", "lacks 192.168.10.14"}, {"nodes/m2/kubelet-server.crt", "has 192.168.10.12"},
			{"nodes/m2/etcd-server.crt", "has 192.168.10.12"}, {"nodes/m2/etcd-peer.crt", "has 192.168.10.12"},
		}},
		{"subject drift", true, func(t *testing.T, st Store, s *site.Site) {
			l := leafOf(t, s, "admin")
			l.CN = "root"
			issueAt(t, st, l, year, time.Now())
		}, []want{{"admin.crt", `subject was "CN=root,O=kiln:cluster-admins"`}}},
		{"a leaf the site expects and the PKI lacks", true, func(t *testing.T, st Store, s *site.Site) {
			remove(t, st, "nodes/w1")
		}, []want{{"nodes/w1/kubelet-client.crt", "missing: kiln gen issues it"}, {"nodes/w1/kubelet-server.crt", "missing: kiln gen issues it"}}},
		{"a file where etcd/ should be", true, func(t *testing.T, st Store, _ *site.Site) { fileInPlaceOfDir(t, st, "etcd") },
			[]want{{"etcd", "a file where a directory is expected"}}},
		{"a file where a node's directory should be", false, func(t *testing.T, st Store, _ *site.Site) {
			fileInPlaceOfDir(t, st, "nodes/m3")
		}, []want{{"nodes/m3", "a file where a directory is expected"}}},
		{"a file where a node's directory should be, against the site", true, func(t *testing.T, st Store, _ *site.Site) {
			fileInPlaceOfDir(t, st, "nodes/m3")
		}, []want{{"nodes/m3", "a file where a directory is expected"}}},
		{"a directory where ca.crt should be", false, func(t *testing.T, st Store, _ *site.Site) { dirInPlaceOfFile(t, st, "ca.crt") },
			[]want{{"ca.crt", "a directory where a file is expected"}}},
		{"all of it at once", true, func(t *testing.T, st Store, s *site.Site) {
			copyFile(t, st, "nodes/w2/kubelet-client.key", "nodes/w1/kubelet-client.key")
			remove(t, st, "nodes/w1/kubelet-server.key")
			writeFile(t, st, "sa.key", []byte("garbage"))
			putPair(t, st, "nodes/m1/etcd-peer", foreignPair(t, s, "nodes/m1/etcd-peer"))
			issueAt(t, st, leafOf(t, s, "admin"), year, time.Now().Add(-2*year))
			issueAt(t, st, leafOf(t, s, "scheduler"), year, time.Now().Add(-year+10*24*time.Hour))
			s.Cluster.DiscoveryName = "api.lab.example"
			dirInPlaceOfFile(t, st, "front-proxy-client.crt")
		}, []want{
			{"nodes/w1/kubelet-client.key", "does not belong to"},
			{"nodes/w1/kubelet-server.key", "missing, while"},
			{"sa.key", "not a PEM private key"},
			{"nodes/m1/etcd-peer.crt", "signed by another key than etcd/ca.crt's"},
			{"admin.crt", "expired on"},
			{"scheduler.crt", "within the renew window"},
			{"nodes/m1/apiserver.crt", "lacks api.lab.example"},
			{"nodes/m2/apiserver.crt", "lacks api.lab.example"},
			{"nodes/m3/apiserver.crt", "lacks api.lab.example"},
			{"front-proxy-client.crt", "a directory where a file is expected"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := loadSite(t)
			st := freshStore(t, s)
			tc.spoil(t, st, s)
			if !tc.withSite {
				s = nil
			}
			_, ps, err := st.Check(s, 0)
			if err != nil {
				t.Fatal(err)
			}
			checkProblems(t, st.Dir, ps, tc.want)
		})
	}
}

// --warn moves where expiring soon starts.
func TestCheckWarnsWithinTheGivenTime(t *testing.T) {
	s := loadSite(t)
	st := freshStore(t, s)
	_, ps, err := st.Check(s, 400*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != len(Leaves(s)) {
		t.Errorf("%d problems, want one per leaf (%d): %v", len(ps), len(Leaves(s)), ps)
	}
}

func TestCheckOfNoPKI(t *testing.T) {
	for _, dir := range []string{t.TempDir(), t.TempDir() + "/none"} {
		if _, _, err := (Store{Dir: dir}).Check(nil, 0); !errors.Is(err, ErrNoPKI) {
			t.Errorf("%s: err = %v, want ErrNoPKI", dir, err)
		}
	}
}
