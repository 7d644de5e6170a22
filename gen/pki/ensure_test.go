package pki

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/treetest"
)

// A leaf that no longer fits the site is re-issued under the CA that
// signs it now, its old pair copied byte for byte to backup/<time>/ and
// the reason naming the field, as it was and as the site asks.
func TestEnsureReissuesWhatNoLongerFits(t *testing.T) {
	year := 8760 * time.Hour
	for _, tc := range []struct {
		name   string
		drift  func(t *testing.T, st Store, s *site.Site)
		want   func(s *site.Site) map[string]string // re-issued stem: words of its reason
		issued []string
	}{
		{"signed by a foreign CA", func(t *testing.T, st Store, s *site.Site) {
			putPair(t, st, "nodes/w1/kubelet-client", foreignPair(t, s, "nodes/w1/kubelet-client"))
		}, only("nodes/w1/kubelet-client", `signed by another key than ca.crt's`), nil},
		{"expired", func(t *testing.T, st Store, s *site.Site) {
			issueAt(t, st, leafOf(t, s, "admin"), year, time.Now().Add(-2*year))
		}, only("admin", "expired on"), nil},
		{"inside the renew window", func(t *testing.T, st Store, s *site.Site) {
			issueAt(t, st, leafOf(t, s, "scheduler"), year, time.Now().Add(-year+10*24*time.Hour))
		}, only("scheduler", "within the renew window of 30d"), nil},
		{"a master re-addressed", func(t *testing.T, st Store, s *site.Site) {
			s.Nodes[1].Network.Address = "192.168.10.14/24"
		}, func(*site.Site) map[string]string {
			m := map[string]string{}
			for _, stem := range []string{"nodes/m1/apiserver", "nodes/m2/apiserver", "nodes/m3/apiserver",
				"nodes/m2/kubelet-server", "nodes/m2/etcd-server", "nodes/m2/etcd-peer"} {
				m[stem] = "SANs drifted: the certificate has 192.168.10.12, which the site no longer names; lacks 192.168.10.14, which the site now names"
			}
			return m
		}, nil},
		{"the discovery name changed", func(t *testing.T, st Store, s *site.Site) {
			s.Cluster.DiscoveryName = "api.lab.example"
		}, func(*site.Site) map[string]string {
			m := map[string]string{}
			for _, n := range []string{"m1", "m2", "m3"} {
				m[NodeStem(n, "apiserver")] = "has kube-apiserver.kiln.internal, which the site no longer names; lacks api.lab.example"
			}
			return m
		}, nil},
		{"another subject", func(t *testing.T, st Store, s *site.Site) {
			l := leafOf(t, s, "nodes/w2/kubelet-client")
			l.Orgs = []string{"system:masters"}
			issueAt(t, st, l, year, time.Now())
		}, only("nodes/w2/kubelet-client", `subject was "CN=system:node:w2,O=system:masters", the site asks for "CN=system:node:w2,O=system:nodes"`), nil},
		{"other usages", func(t *testing.T, st Store, s *site.Site) {
			l := leafOf(t, s, "nodes/m3/etcd-peer")
			l.Client = false
			issueAt(t, st, l, year, time.Now())
		}, only("nodes/m3/etcd-peer", "usages were [digital signature, key encipherment, server auth], the site asks for [digital signature, key encipherment, client auth, server auth]"), nil},
		{"another lifetime", func(t *testing.T, st Store, s *site.Site) {
			s.Cluster.Certificates.LeafValidity = "180d"
		}, func(s *site.Site) map[string]string {
			m := map[string]string{}
			for _, l := range Leaves(s) {
				m[l.Stem] = "lifetime was 365d, the site asks for 180d"
			}
			return m
		}, nil},
		{"a node renamed: its certificates are new, nothing re-issued", func(t *testing.T, st Store, s *site.Site) {
			s.Nodes[3].Name = "w9"
		}, func(*site.Site) map[string]string { return nil },
			[]string{"nodes/w9/kubelet-client", "nodes/w9/kubelet-server"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := loadSite(t)
			st := freshStore(t, s)
			tc.drift(t, st, s)
			before := snapshot(t, st.Dir)
			want := tc.want(s)

			ch, err := st.Ensure(s)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ch.Issued, tc.issued) {
				t.Errorf("issued %v, want %v", ch.Issued, tc.issued)
			}
			var got []string
			for _, r := range ch.Reissued {
				got = append(got, r.Stem)
				line := r.String()
				if !strings.HasPrefix(line, r.Stem+": ") || !strings.Contains(line, want[r.Stem]) || !strings.Contains(line, r.Backup) {
					t.Errorf("the line %q does not name %s, the drift %q and the backup", line, r.Stem, want[r.Stem])
				}
				checkBackup(t, st, r, before)
			}
			if w := slices.Sorted(maps.Keys(want)); !slices.Equal(slices.Sorted(slices.Values(got)), w) {
				t.Errorf("re-issued %v, want %v", got, w)
			}
			checkFits(t, st, s)
			for path, data := range before {
				if stem := stemOf(st, path); !slices.Contains(got, stem) && !bytes.Equal(snapshot(t, st.Dir)[path], data) {
					t.Errorf("%s changed, and it was not re-issued", path)
				}
			}
			if again, err := st.Ensure(s); err != nil || len(again.Issued)+len(again.Reissued) != 0 {
				t.Errorf("a second run did %+v, %v; want nothing", again, err)
			}
		})
	}
}

func only(stem, why string) func(*site.Site) map[string]string {
	return func(*site.Site) map[string]string { return map[string]string{stem: why} }
}

func stemOf(st Store, path string) string {
	rel, _ := filepath.Rel(st.Dir, path)
	return strings.TrimSuffix(filepath.ToSlash(rel), filepath.Ext(rel))
}

// checkBackup asserts that r's backup holds the old pair exactly.
func checkBackup(t *testing.T, st Store, r Reissue, before map[string][]byte) {
	t.Helper()
	if filepath.Dir(r.Backup) != filepath.Join(st.Dir, "backup") {
		t.Errorf("backup %s is not under %s/backup", r.Backup, st.Dir)
	}
	for _, ext := range []string{".crt", ".key"} {
		old := before[st.path(r.Stem, ext)]
		b, err := os.ReadFile((Store{Dir: r.Backup}).path(r.Stem, ext))
		if err != nil || !bytes.Equal(b, old) {
			t.Errorf("the backup of %s%s is not the old file: %v", r.Stem, ext, err)
		}
		if now, _ := os.ReadFile(st.path(r.Stem, ext)); bytes.Equal(now, old) {
			t.Errorf("%s%s was not replaced", r.Stem, ext)
		}
	}
}

// checkFits asserts that every leaf on disk is what the site asks for.
func checkFits(t *testing.T, st Store, s *site.Site) {
	t.Helper()
	for _, l := range Leaves(s) {
		e, ok, ps := st.read(l.Stem)
		ca, _, _ := st.read(l.CA.Stem)
		if !ok || len(ps) > 0 {
			t.Errorf("%s: %v", l.Stem, ps)
			continue
		}
		if why := misfit(l, e.cert, ca.cert, s.Cluster.LeafValidity()); len(why) > 0 {
			t.Errorf("%s still does not fit: %v", l.Stem, why)
		}
	}
}

// What only the operator can settle stops kiln gen before it writes
// anything, every problem named at once with its file.
func TestEnsureRefusesWhatOnlyTheOperatorCanSettle(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, st Store)
		want  []want
	}{
		{"garbage sa.key", func(t *testing.T, st Store) { writeFile(t, st, "sa.key", []byte("garbage")) },
			[]want{{"sa.key", "not a PEM private key"}}},
		{"sa.key a PEM block of no key", func(t *testing.T, st Store) {
			writeFile(t, st, "sa.key", []byte("-----BEGIN EC PRIVATE KEY-----\nZ2FyYmFnZQ==\n-----END EC PRIVATE KEY-----\n"))
		}, []want{{"sa.key", "not a private key"}}},
		{"missing sa.pub", func(t *testing.T, st Store) { remove(t, st, "sa.pub") },
			[]want{{"sa.pub", "missing, while"}}},
		{"garbage sa.key and no sa.pub", func(t *testing.T, st Store) {
			writeFile(t, st, "sa.key", []byte("garbage"))
			remove(t, st, "sa.pub")
		}, []want{{"sa.key", "not a PEM private key"}, {"sa.pub", "missing, while"}}},
		{"a garbage certificate and no key", func(t *testing.T, st Store) {
			writeFile(t, st, "admin.crt", []byte("garbage"))
			remove(t, st, "admin.key")
		}, []want{{"admin.crt", "not a PEM certificate"}, {"admin.key", "missing, while"}}},
		{"a garbage encryption key", func(t *testing.T, st Store) { writeFile(t, st, "encryption-key.b64", []byte("garbage")) },
			[]want{{"encryption-key.b64", "not 32 bytes in base64"}}},
		{"garbage sa.pub", func(t *testing.T, st Store) { writeFile(t, st, "sa.pub", []byte("garbage")) },
			[]want{{"sa.pub", "not a PEM public key"}}},
		{"sa.pub of another key", func(t *testing.T, st Store) { writeFile(t, st, "sa.pub", otherPublicKey(t)) },
			[]want{{"sa.pub", "not the public half of"}}},
		{"an expired CA", func(t *testing.T, st Store) { expiredCA(t, st, EtcdCA) },
			[]want{{"etcd/ca.crt", "the CA expired on"}}},
		{"a CA missing while what it signed is here", func(t *testing.T, st Store) { remove(t, st, "etcd/ca.crt"); remove(t, st, "etcd/ca.key") },
			[]want{{"etcd/ca.crt", "missing, while"}}},
		{"a CA key that is another's", func(t *testing.T, st Store) { copyFile(t, st, "ca.key", "front-proxy-ca.key") },
			[]want{{"front-proxy-ca.key", "does not belong to"}}},
		{"a leaf key that is another's", func(t *testing.T, st Store) {
			copyFile(t, st, "nodes/w2/kubelet-client.key", "nodes/w1/kubelet-client.key")
		}, []want{{"nodes/w1/kubelet-client.key", "do not belong together"}}},
		{"a garbage leaf key", func(t *testing.T, st Store) { writeFile(t, st, "nodes/m1/apiserver.key", []byte("garbage")) },
			[]want{{"nodes/m1/apiserver.key", "not a PEM private key"}}},
		{"a missing leaf key", func(t *testing.T, st Store) { remove(t, st, "admin.key") },
			[]want{{"admin.key", "missing, while"}}},
		{"a file where etcd/ should be", func(t *testing.T, st Store) { fileInPlaceOfDir(t, st, "etcd") },
			[]want{{"etcd", "a file where a directory is expected"}}},
		{"a directory where ca.crt should be", func(t *testing.T, st Store) { dirInPlaceOfFile(t, st, "ca.crt") },
			[]want{{"ca.crt", "a directory where a file is expected"}}},
		{"all of it at once", func(t *testing.T, st Store) {
			writeFile(t, st, "sa.key", []byte("garbage"))
			fileInPlaceOfDir(t, st, "etcd")
			copyFile(t, st, "nodes/w2/kubelet-client.key", "nodes/w1/kubelet-client.key")
		}, []want{{"sa.key", "not a PEM private key"}, {"etcd", "a file where a directory is expected"},
			{"nodes/w1/kubelet-client.key", "do not belong together"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := loadSite(t)
			st := freshStore(t, s)
			tc.spoil(t, st)
			before := treetest.Snapshot(t, st.Dir)
			_, err := st.Ensure(s)
			var ps Problems
			if !errors.As(err, &ps) {
				t.Fatalf("err = %v, want the problems", err)
			}
			checkProblems(t, st.Dir, ps, tc.want)
			treetest.Unchanged(t, st.Dir, before)
		})
	}
}

// A CA kiln cannot sign with is an error that says the way out, never a
// new CA.
func TestEnsureSaysTheWayOutOfABrokenCA(t *testing.T) {
	s := loadSite(t)
	st := freshStore(t, s)
	expiredCA(t, st, KubernetesCA)
	_, err := st.Ensure(s)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(st.Dir, "ca.crt")+": the CA expired on") ||
		!strings.Contains(err.Error(), "kiln never re-issues a CA") || !strings.Contains(err.Error(), "start a new PKI") {
		t.Errorf("err = %v, want the expired CA named with the way out", err)
	}
}
