package anchor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/catalog"
	"github.com/kiln-project/kiln/node/etcdmember"
)

const nodeJSON = `{"apiVersion":"kiln.dev/v1alpha1","kind":"Node","name":"m1","role":"genesis","address":"10.0.0.2",
"cluster":{"domain":"cluster.local","podCIDR":"10.244.0.0/16","serviceCIDR":"10.96.0.0/12","apiServerPort":6443,"discoveryName":"api.kiln.internal"},
"masters":[{"name":"m1","address":"10.0.0.2"}]}`

func host(t *testing.T) Host {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc/kiln"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/kiln/node.json"), []byte(nodeJSON), 0o644)
	cat := &catalog.Catalog{}
	for _, r := range catalog.Roles {
		cat.Images = append(cat.Images, catalog.Image{Role: r, Ref: "kiln.local/" + r + ":1"})
	}
	data, _ := cat.Marshal()
	os.MkdirAll(filepath.Join(root, filepath.Dir(catalog.Path)), 0o755)
	os.WriteFile(filepath.Join(root, catalog.Path), data, 0o644)
	return Host{Root: root, Log: t.Logf}
}

// withMembership records m1's etcd member as the role does once the
// cluster is bootstrapped, with a joined second master.
func withMembership(t *testing.T, h Host) Host {
	rec := etcdmember.Genesis("m1", "10.0.0.2")
	rec.State = etcdmember.StateExisting
	rec.Peers = append(rec.Peers, etcdmember.Peer{Name: "m2", PeerURL: "https://10.0.0.3:2380"})
	if err := etcdmember.Write(h.Root, rec); err != nil {
		t.Fatal(err)
	}
	return h
}

// The etcd anchor renders from the recorded membership, never a new
// cluster, and writes nothing before the role recorded one.
func TestEtcdRendersTheRecordedMembership(t *testing.T) {
	h := host(t)
	if wrote, err := h.Keep("etcd"); err == nil || wrote || !strings.Contains(err.Error(), "no etcd membership recorded") {
		t.Fatalf("no record: wrote=%v err=%v", wrote, err)
	}
	if _, err := os.Stat(filepath.Join(h.Root, manifests.StaticPodDir, "etcd.yaml")); !os.IsNotExist(err) {
		t.Fatalf("etcd written without a membership record (%v)", err)
	}
	withMembership(t, h)
	if _, err := h.Keep("etcd"); err != nil {
		t.Fatal(err)
	}
	pod, _ := os.ReadFile(filepath.Join(h.Root, manifests.StaticPodDir, "etcd.yaml"))
	if !strings.Contains(string(pod), "--config-file="+manifests.EtcdConfigPath) {
		t.Errorf("etcd manifest does not name its configuration file:\n%s", pod)
	}
	conf, _ := os.ReadFile(filepath.Join(h.Root, manifests.EtcdConfigPath))
	for _, want := range []string{"initial-cluster-state: existing", "initial-cluster: m1=https://10.0.0.2:2380,m2=https://10.0.0.3:2380"} {
		if !strings.Contains(string(conf), want) {
			t.Errorf("etcd configuration lacks %s:\n%s", want, conf)
		}
	}
}

// An anchor writes a missing or changed manifest and leaves a current one alone.
func TestKeepWritesOnlyWhatDiffers(t *testing.T) {
	h := host(t)
	p := filepath.Join(h.Root, manifests.StaticPodDir, "kube-apiserver.yaml")
	for i, tc := range []struct {
		before    func()
		wantWrite bool
	}{
		{func() {}, true},
		{func() {}, false},
		{func() { os.WriteFile(p, []byte("edited by hand"), 0o644) }, true},
		{func() { os.Remove(p) }, true},
	} {
		tc.before()
		wrote, err := h.Keep("kube-apiserver")
		if err != nil || wrote != tc.wantWrite {
			t.Errorf("step %d: wrote=%v err=%v, want wrote=%v", i, wrote, err, tc.wantWrite)
		}
	}
	data, _ := os.ReadFile(p)
	if !strings.Contains(string(data), "image: kiln.local/kube-apiserver:1") {
		t.Errorf("manifest: %s", data)
	}
	if _, err := h.Keep("kube-proxy"); err == nil {
		t.Error("an unanchored component was accepted")
	}
}

// etcd's preStop keeps the manifest until kiln-leave says the member
// left: a voter stopped in place costs the quorum.
func TestEtcdCleanupWaitsForTheMemberRemoval(t *testing.T) {
	h := withMembership(t, host(t))
	if _, err := h.Keep("etcd"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.Cleanup(ctx, "etcd", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(h.Root, manifests.StaticPodDir, "etcd.yaml")); err != nil {
		t.Errorf("etcd's manifest moved with its member still in the cluster: %v", err)
	}
	if _, err := h.Keep("kube-apiserver"); err != nil {
		t.Fatal(err)
	}
	if err := h.Cleanup(context.Background(), "kube-apiserver", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(h.Root, manifests.StaticPodDir, "kube-apiserver.yaml")); !os.IsNotExist(err) {
		t.Errorf("the apiserver's manifest is still in place (%v)", err)
	}
}

func TestCleanupMovesToBackup(t *testing.T) {
	h := withMembership(t, host(t))
	if _, err := h.Keep("etcd"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(h.Root, BackupDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.Root, manifests.EtcdMemberRemovedMarker), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	if err := h.Cleanup(context.Background(), "etcd", now); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(h.Root, manifests.StaticPodDir, "etcd.yaml")); !os.IsNotExist(err) {
		t.Errorf("the manifest is still in the static pod directory (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(h.Root, BackupDir, "etcd.yaml.20261123T080000Z")); err != nil {
		t.Errorf("no backup: %v", err)
	}
	if err := h.Cleanup(context.Background(), "etcd", now); err != nil {
		t.Errorf("a second cleanup: %v", err)
	}
}

func TestZoneFollowsReadyEndpointsAndNeverEmpties(t *testing.T) {
	h := host(t)
	ep := func(ips ...string) *corev1.Endpoints {
		e := &corev1.Endpoints{Subsets: []corev1.EndpointSubset{{}}}
		for _, ip := range ips {
			e.Subsets[0].Addresses = append(e.Subsets[0].Addresses, corev1.EndpointAddress{IP: ip})
		}
		return e
	}
	for i, tc := range []struct {
		ep        *corev1.Endpoints
		ok, wrote bool
		has       []string
	}{
		{ep("10.0.0.2", "10.0.0.3"), true, true, []string{"10.0.0.2", "10.0.0.3"}},
		{ep("10.0.0.3", "10.0.0.2"), true, false, []string{"10.0.0.2", "10.0.0.3"}}, // same set: no rewrite
		{ep("10.0.0.2"), true, true, []string{"10.0.0.2"}},                          // an unhealthy one dropped
		{ep(), false, false, []string{"10.0.0.2"}},                                  // none ready: zone kept
	} {
		z, ok := ZoneFrom(tc.ep, "api.kiln.internal", uint32(i+1))
		if ok != tc.ok {
			t.Fatalf("step %d: ok=%v", i, ok)
		}
		if ok {
			wrote, err := h.KeepZone(z)
			if err != nil || wrote != tc.wrote {
				t.Errorf("step %d: wrote=%v err=%v", i, wrote, err)
			}
		}
		zone, _ := os.ReadFile(filepath.Join(h.Root, manifests.ZoneFile))
		if got := strings.Count(string(zone), "@\tIN\tA\t"); got != len(tc.has) {
			t.Errorf("step %d: %d A records, want %v:\n%s", i, got, tc.has, zone)
		}
	}
}

// Across two mounts (the anchor's pod mounts the static pod and backup
// directories apart) the manifest is copied, then removed.
func TestCopyThenRemoveKeepsTheManifest(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "a", "etcd.yaml"), filepath.Join(dir, "b", "etcd.yaml.1")
	if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte("pod"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := copyThenRemove(src, dst); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(dst); err != nil || string(data) != "pod" {
		t.Errorf("backup %q, %v", data, err)
	}
	if _, err := os.Stat(src); !os.IsNotExist(err) {
		t.Errorf("the manifest is still in place (%v)", err)
	}
}

// The masters' anchor pod's cleanup: every static pod but etcd moves at
// once, etcd (last) stays while its member is in the cluster, and the
// zone is never touched.
func TestCleanupAllMovesAllButAnUnremovedEtcd(t *testing.T) {
	h := withMembership(t, host(t))
	for _, c := range Components {
		if _, err := h.Keep(c); err != nil {
			t.Fatal(err)
		}
	}
	zone := filepath.Join(h.Root, manifests.ZoneFile)
	os.MkdirAll(filepath.Dir(zone), 0o755)
	os.WriteFile(zone, []byte("zone"), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.CleanupAll(ctx, manifests.MastersAnchorComponents, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, c := range Components {
		_, err := os.Stat(filepath.Join(h.Root, manifests.StaticPodDir, c+".yaml"))
		if moved := os.IsNotExist(err); moved != (c != "etcd") {
			t.Errorf("%s: moved=%v (stat: %v)", c, moved, err)
		}
	}
	if _, err := os.Stat(zone); err != nil {
		t.Errorf("the zone: %v", err)
	}
}

func TestCheckComponents(t *testing.T) {
	for _, tc := range []struct {
		components []string
		err        string
	}{
		{[]string{"etcd"}, ""},
		{manifests.MastersAnchorComponents, ""},
		{[]string{Discovery}, ""},
		{nil, "no component"},
		{[]string{"etcd", "kubelet"}, `unknown component "kubelet"`},
		{[]string{"etcd", "etcd"}, `"etcd" given twice`},
	} {
		err := CheckComponents(tc.components)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%v: %v, want %q", tc.components, err, tc.err)
		}
	}
}

// Every host path the anchors read or write is under a host path their
// pods mount, at the same place: the masters' pod keeps every component
// and the zone, the others' pod the zone.
func TestAnchorPodsMountWhatTheAnchorTouches(t *testing.T) {
	var f nodefile.NodeFile
	if err := json.Unmarshal([]byte(nodeJSON), &f); err != nil {
		t.Fatal(err)
	}
	touched := map[string][]string{
		manifests.MastersAnchor: {nodefile.Path, catalog.Path, etcdmember.Path, manifests.EtcdConfigPath, manifests.ZoneFile,
			manifests.StaticPodDir + "/etcd.yaml", BackupDir + "/etcd.yaml.x", manifests.EtcdMemberRemovedMarker},
		manifests.OthersAnchor: {nodefile.Path, manifests.ZoneFile},
	}
	for _, o := range manifests.Anchors(manifests.GenesisParams(f, manifests.Images{})) {
		ds, ok := o.(*appsv1.DaemonSet)
		if !ok {
			continue
		}
		spec := ds.Spec.Template.Spec
		hostPath := map[string]string{}
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				hostPath[v.Name] = v.HostPath.Path
			}
		}
		for _, p := range touched[ds.Name] {
			if !slices.ContainsFunc(spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool {
				h := hostPath[m.Name]
				return h != "" && h == m.MountPath && (p == h || strings.HasPrefix(p, h+"/"))
			}) {
				t.Errorf("%s mounts nothing that shows %s", ds.Name, p)
			}
		}
	}
}
