package nodeconfig

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudflare/cfssl/helpers"
	"github.com/coreos/ignition/v2/config/v3_5/types"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/golden"
	"github.com/kiln-project/kiln/internal/ignition"
)

// testPKI is a PKI committed for the golden tests (its keys protect
// nothing); -update creates it when it is missing.
const testPKI = "testdata/pki"

// testPKIClock is the time the golden tests run at, inside the lifetime
// of testPKI's certificates, so that no run finds them due for renewal.
func testPKIClock() time.Time { return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) }

func exampleSite(t *testing.T) *site.Site {
	t.Helper()
	s, err := site.Load("../../examples/site.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// freshPKI is a new PKI for the site in a temporary directory.
func freshPKI(t *testing.T, s *site.Site) pki.Store {
	t.Helper()
	st := pki.Store{Dir: t.TempDir()}
	if _, err := st.Ensure(s); err != nil {
		t.Fatal(err)
	}
	return st
}

func decode(t *testing.T, data []byte) types.Config {
	t.Helper()
	cfg, _, err := ignition.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func contents(t *testing.T, f types.File) []byte {
	t.Helper()
	src := *f.Contents.Source
	b64, ok := strings.CutPrefix(src, "data:;base64,")
	if !ok {
		t.Fatalf("%s: source %.30q is not a base64 data URL", f.Path, src)
	}
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// The golden configs hold the exact bytes for the example site and the
// committed test PKI: any change to what a node receives shows in review.
func TestGoldenConfigs(t *testing.T) {
	s := exampleSite(t)
	st := pki.Store{Dir: testPKI, Now: testPKIClock}
	if golden.Updating() {
		if _, err := st.Ensure(s); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "site")
	if _, err := Generate(s, st, out); err != nil {
		t.Fatal(err)
	}
	for _, n := range s.Nodes {
		got, err := os.ReadFile(filepath.Join(out, NodesDir, n.Name+".ign"))
		if err != nil {
			t.Fatal(err)
		}
		golden.Check(t, filepath.Join("testdata", "golden", n.Name+".golden"), reviewable(t, got))
	}
}

// reviewable renders a config for review: a line with the sha256 of its
// exact bytes, the config with each file's contents replaced by a pointer,
// then every file decoded under its path and mode.
func reviewable(t *testing.T, raw []byte) []byte {
	t.Helper()
	var cfg types.Config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	var files []golden.File
	below := "(contents below)"
	for i, f := range cfg.Storage.Files {
		files = append(files, golden.File{Path: f.Path, Mode: os.FileMode(*f.Mode), Content: contents(t, f)})
		cfg.Storage.Files[i].Contents.Source = &below
	}
	skeleton, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "### config (sha256 %x of the rendered bytes)\n%s\n", sha256.Sum256(raw), skeleton)
	b.Write(golden.Files(files))
	return b.Bytes()
}

func TestSameSiteAndPKIGiveIdenticalOutput(t *testing.T) {
	s := exampleSite(t)
	st := freshPKI(t, s)
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	for _, out := range []string{a, b} {
		if _, err := Generate(s, st, out); err != nil {
			t.Fatal(err)
		}
	}
	for _, rel := range append(nodePaths(s), AdminKubeconfig) {
		x, _ := os.ReadFile(filepath.Join(a, rel))
		y, _ := os.ReadFile(filepath.Join(b, rel))
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Errorf("%s differs between two runs", rel)
		}
	}
}

func nodePaths(s *site.Site) []string {
	var out []string
	for _, n := range s.Nodes {
		ign := filepath.Join(NodesDir, n.Name+".ign")
		out = append(out, ign, ign+HashSuffix)
	}
	return out
}

// privateKeys indexes every private key of the PKI by its public key, so
// a key found in a node's config can be named.
func privateKeys(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".key") {
			return err
		}
		data, _ := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[publicOf(t, data)] = strings.TrimSuffix(rel, ".key")
		return nil
	})
	return out
}

func publicOf(t *testing.T, keyPEM []byte) string {
	t.Helper()
	key, err := helpers.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return string(der)
}

// keysIn names every private key a config carries: PEM keys in files and
// client keys embedded in kubeconfigs.
func keysIn(t *testing.T, cfg types.Config, index map[string]string) []string {
	t.Helper()
	var found []string
	name := func(where string, keyPEM []byte) {
		stem, ok := index[publicOf(t, keyPEM)]
		if !ok {
			t.Errorf("%s holds a private key that is not in the PKI", where)
		}
		found = append(found, stem)
	}
	for _, f := range cfg.Storage.Files {
		data := contents(t, f)
		for rest := data; ; {
			var b *pem.Block
			b, rest = pem.Decode(rest)
			if b == nil {
				break
			}
			if strings.Contains(b.Type, "PRIVATE KEY") {
				name(f.Path, pem.EncodeToMemory(b))
			}
		}
		if strings.HasPrefix(f.Path, KubeconfigDir) {
			kc, err := clientcmd.Load(data)
			if err != nil {
				t.Fatalf("%s: %v", f.Path, err)
			}
			for _, a := range kc.AuthInfos {
				name(f.Path, a.ClientKeyData)
			}
		}
	}
	slices.Sort(found)
	return slices.Compact(found)
}

// Least privilege, proven on every node's config: a worker holds only its
// own kubelet keys; a master its own keys and the control plane's, the
// Kubernetes CA key (the controller-manager signs kubelet CSRs) and the
// service-account key, but no etcd or front-proxy CA key and nothing of
// another node.
func TestEachNodeGetsOnlyTheKeysItsRoleNeeds(t *testing.T) {
	s := exampleSite(t)
	st := freshPKI(t, s)
	index := privateKeys(t, st.Dir)
	for _, n := range s.Nodes {
		t.Run(n.Name, func(t *testing.T) {
			data, err := Render(s, st, n)
			if err != nil {
				t.Fatal(err)
			}
			got := keysIn(t, decode(t, data), index)
			want := []string{"nodes/" + n.Name + "/kubelet-client"}
			if n.IP().IsValid() {
				want = append(want, "nodes/"+n.Name+"/kubelet-server")
			}
			if n.IsMaster() {
				want = append(want, "ca", "sa", "apiserver-etcd-client", "apiserver-kubelet-client",
					"controller-manager", "front-proxy-client", "scheduler",
					"nodes/"+n.Name+"/agent", "nodes/"+n.Name+"/apiserver", "nodes/"+n.Name+"/etcd-peer", "nodes/"+n.Name+"/etcd-server")
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s (%s) holds the keys of\n  %v\nwant\n  %v", n.Name, n.Role, got, want)
			}
			for _, forbidden := range []string{"etcd/ca", "front-proxy-ca", "admin", "super-admin"} {
				if slices.Contains(got, forbidden) {
					t.Errorf("%s holds the %s key", n.Name, forbidden)
				}
			}
			if !n.IsMaster() {
				for _, k := range got {
					if k == "ca" || k == "sa" || strings.Contains(k, "etcd") {
						t.Errorf("worker %s holds %s", n.Name, k)
					}
				}
			}
		})
	}
}

func TestSecretsAreRootOnly0600(t *testing.T) {
	s := exampleSite(t)
	st := freshPKI(t, s)
	for _, n := range s.Nodes {
		data, err := Render(s, st, n)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range decode(t, data).Storage.Files {
			body := contents(t, f)
			secret := bytes.Contains(body, []byte("PRIVATE KEY")) || bytes.Contains(body, []byte("client-key-data"))
			if f.User.ID == nil || *f.User.ID != 0 || f.Group.ID == nil || *f.Group.ID != 0 {
				t.Errorf("%s:%s is not owned by root", n.Name, f.Path)
			}
			if secret && *f.Mode != 0o600 {
				t.Errorf("%s:%s holds a key with mode %o", n.Name, f.Path, *f.Mode)
			}
			if f.Overwrite == nil || !*f.Overwrite {
				t.Errorf("%s:%s does not replace the image's copy", n.Name, f.Path)
			}
		}
	}
}

func TestConfigContents(t *testing.T) {
	s := exampleSite(t)
	st := freshPKI(t, s)
	byName := map[string]site.Node{}
	for _, n := range s.Nodes {
		byName[n.Name] = n
	}
	for _, tc := range []struct {
		node string
		path string
		want []string
	}{
		{"m1", HostnamePath, []string{"m1\n"}},
		{"m1", NetworkPath, []string{"MACAddress=52:54:00:10:00:11", "Address=192.168.10.11/24", "Gateway=192.168.10.1", "DNS=192.168.10.1", "NTP=192.168.10.1"}},
		{"w2", NetworkPath, []string{"MACAddress=52:54:00:10:00:22 52:54:00:10:01:22", "DHCP=yes"}},
		{"w1", ZonePath, []string{"$ORIGIN kube-apiserver.kiln.internal.", "@\tIN\tA\t192.168.10.11", "@\tIN\tA\t192.168.10.12", "@\tIN\tA\t192.168.10.13"}},
		{"w1", NodeFilePath, []string{`"role": "worker"`, `"clusterDNS": "10.96.0.10"`, `"discoveryName": "kube-apiserver.kiln.internal"`}},
		{"m1", NodeFilePath, []string{`"role": "genesis"`, `"address": "192.168.10.11"`}},
		{"w1", KubeconfigDir + "/kubelet.conf", []string{"server: https://kube-apiserver.kiln.internal:6443"}},
		{"m2", nodefile.AgentKubeconfig, []string{"server: https://kube-apiserver.kiln.internal:6443"}},
	} {
		t.Run(tc.node+tc.path, func(t *testing.T) {
			data, err := Render(s, st, byName[tc.node])
			if err != nil {
				t.Fatal(err)
			}
			cfg := decode(t, data)
			i := slices.IndexFunc(cfg.Storage.Files, func(f types.File) bool { return f.Path == tc.path })
			if i < 0 {
				t.Fatalf("no %s in the config", tc.path)
			}
			body := string(contents(t, cfg.Storage.Files[i]))
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("%s lacks %q:\n%s", tc.path, w, body)
				}
			}
			if len(cfg.Passwd.Users) != 1 || len(cfg.Passwd.Users[0].SSHAuthorizedKeys) != 1 {
				t.Errorf("SSH keys: %+v", cfg.Passwd.Users)
			}
			if len(cfg.Storage.Disks) != 1 || cfg.Storage.Disks[0].Device != byName[tc.node].InstallDisk {
				t.Errorf("state partition disk: %+v", cfg.Storage.Disks)
			}
		})
	}
}

// The operator's kubeconfig works as written: a context per master at
// its address, checking the certificate for the discovery name.
func TestAdminKubeconfigHasAContextPerMaster(t *testing.T) {
	s := exampleSite(t)
	st := freshPKI(t, s)
	out := filepath.Join(t.TempDir(), "site")
	if _, err := Generate(s, st, out); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.LoadFromFile(filepath.Join(out, AdminKubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	if kc.CurrentContext != "admin@"+s.Cluster.Name+"-"+s.Masters()[0].Name {
		t.Errorf("current context %s, want the genesis node's", kc.CurrentContext)
	}
	if len(kc.Contexts) != len(s.Masters()) {
		t.Errorf("%d contexts for %d masters", len(kc.Contexts), len(s.Masters()))
	}
	for _, m := range s.Masters() {
		c := kc.Clusters[kc.Contexts["admin@"+s.Cluster.Name+"-"+m.Name].Cluster]
		want := "https://" + m.IP().String() + ":6443"
		if c == nil || c.Server != want || c.TLSServerName != s.Cluster.DiscoveryName {
			t.Errorf("master %s: cluster %+v, want server %s checked for %s", m.Name, c, want, s.Cluster.DiscoveryName)
		}
	}
	fi, _ := os.Stat(filepath.Join(out, AdminKubeconfig))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("admin.kubeconfig mode %v", fi.Mode())
	}
}

// A failed run leaves the previous output exactly as it was and no
// staging directory behind.
func TestFailedRunLeavesPreviousOutput(t *testing.T) {
	s := exampleSite(t)
	st := freshPKI(t, s)
	parent := t.TempDir()
	out := filepath.Join(parent, "site")
	if _, err := Generate(s, st, out); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(out, NodesDir, "w2.ign"))
	os.Remove(filepath.Join(st.Dir, "nodes/w1/kubelet-server.crt")) // half a pair: Ensure refuses

	s.Cluster.NTPServers = []string{"10.1.1.1"} // would change every config
	if _, err := Generate(s, st, out); err == nil {
		t.Fatal("generate succeeded with a broken PKI")
	}
	after, _ := os.ReadFile(filepath.Join(out, NodesDir, "w2.ign"))
	if !bytes.Equal(before, after) {
		t.Error("a failed run changed the output")
	}
	entries, _ := os.ReadDir(parent)
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("leftovers beside the output: %v", names)
	}
}

func TestRenderedConfigsAreSpec35(t *testing.T) {
	s := exampleSite(t)
	st := freshPKI(t, s)
	data, err := Render(s, st, s.Nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Ignition struct{ Version string } `json:"ignition"`
	}
	if err := json.Unmarshal(data, &raw); err != nil || raw.Ignition.Version != IgnitionSpec {
		t.Errorf("version %q, %v", raw.Ignition.Version, err)
	}
}

func TestNodeFileCarriesTheSiteNodesTaints(t *testing.T) {
	s := exampleSite(t)
	n := s.Nodes[0]
	n.Taints = []site.Taint{{Key: "dedicated", Value: "db", Effect: "NoSchedule"}, {Key: "gpu", Effect: "NoExecute"}}
	got := nodeFile(s, n).Taints
	want := []nodefile.Taint{{Key: "dedicated", Value: "db", Effect: "NoSchedule"}, {Key: "gpu", Effect: "NoExecute"}}
	if !slices.Equal(got, want) {
		t.Fatalf("taints = %+v, want %+v", got, want)
	}
}

// A master's node file lists, for each worker of the site, the labels
// the site gives it that its kubelet may not set (what the master's anchor
// may apply at its request); a worker's lists no other node's.
func TestMastersNodeFileCarriesTheWorkersLabels(t *testing.T) {
	s := exampleSite(t)
	var master, worker site.Node
	for i, n := range s.Nodes {
		switch {
		case n.IsMaster() && master.Name == "":
			master = n
		case n.Role == site.RoleWorker && worker.Name == "":
			s.Nodes[i].Labels = map[string]string{"node-role.kubernetes.io/worker": "", "topology.kubernetes.io/zone": "rack-2", "kiln.dev/pool": "edge"}
			worker = s.Nodes[i]
		}
	}
	if master.Name == "" || worker.Name == "" {
		t.Fatal("the example site needs a master and a worker")
	}
	got := nodeFile(s, master).WorkerLabels
	want := map[string]string{"node-role.kubernetes.io/worker": "", "topology.kubernetes.io/zone": "rack-2"}
	if !maps.Equal(got[worker.Name], want) {
		t.Errorf("%s's node file gives %s %v, want %v", master.Name, worker.Name, got[worker.Name], want)
	}
	for _, n := range s.Nodes {
		if _, listed := got[n.Name]; listed != (n.Role == site.RoleWorker) {
			t.Errorf("%s's node file lists %s (a %s): %v", master.Name, n.Name, n.Role, listed)
		}
	}
	if w := nodeFile(s, worker).WorkerLabels; w != nil {
		t.Errorf("%s's own node file lists workers' labels: %v", worker.Name, w)
	}
}

// Each config's sha512, for kiln.config.hash=, is returned and written
// beside it, and the marker claims the file so a rerun replaces it.
func TestEachConfigHasItsHashBeside(t *testing.T) {
	s := exampleSite(t)
	out := filepath.Join(t.TempDir(), "site")
	res, err := Generate(s, freshPKI(t, s), out)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Nodes) != len(s.Nodes) {
		t.Fatalf("%d configs reported, want %d", len(res.Nodes), len(s.Nodes))
	}
	for _, n := range res.Nodes {
		data, err := os.ReadFile(n.Path)
		if err != nil {
			t.Fatal(err)
		}
		beside, err := os.ReadFile(n.Path + HashSuffix)
		if err != nil {
			t.Fatal(err)
		}
		if want := ignition.Hash(data); n.Hash != want || string(beside) != want+"\n" {
			t.Errorf("%s: reported %s, beside it %q; want %s", n.Path, n.Hash, beside, want)
		}
	}
	if _, err := Generate(s, freshPKI(t, s), out); err != nil {
		t.Errorf("a rerun over output with hash files: %v", err)
	}
}

// Masters, and only masters, get the Secrets encryption key, root-only,
// as the configuration the apiserver reads; a second run reuses the key.
func TestMastersAloneGetTheEncryptionKey(t *testing.T) {
	s := exampleSite(t)
	st := freshPKI(t, s)
	key, err := st.EncryptionKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Ensure(s); err != nil {
		t.Fatal(err)
	}
	if again, err := st.EncryptionKey(); err != nil || !bytes.Equal(again, key) {
		t.Fatalf("a second run changed the key (%v)", err)
	}
	secret := "secret: " + base64.StdEncoding.EncodeToString(key)
	for _, n := range s.Nodes {
		data, err := Render(s, st, n)
		if err != nil {
			t.Fatal(err)
		}
		files := decode(t, data).Storage.Files
		i := slices.IndexFunc(files, func(f types.File) bool { return f.Path == EncryptionConfigPath })
		switch {
		case !n.IsMaster() && i >= 0:
			t.Errorf("worker %s gets %s", n.Name, EncryptionConfigPath)
		case !n.IsMaster():
		case i < 0:
			t.Errorf("master %s lacks %s", n.Name, EncryptionConfigPath)
		case *files[i].Mode != 0o600:
			t.Errorf("%s:%s has mode %o", n.Name, EncryptionConfigPath, *files[i].Mode)
		case !strings.Contains(string(contents(t, files[i])), secret) || !strings.Contains(string(contents(t, files[i])), "- secretbox:"):
			t.Errorf("%s:%s does not encrypt with the PKI's key:\n%s", n.Name, EncryptionConfigPath, contents(t, files[i]))
		}
	}
}

// A master's node file lists every node with its static address, which
// its anchor checks serving certificate requests against; a DHCP node
// gets no serving certificate from kiln gen, a static node does.
func TestSiteNodesAndServingCertificates(t *testing.T) {
	s := exampleSite(t)
	var master, dhcp site.Node
	for _, n := range s.Nodes {
		if n.IsMaster() && master.Name == "" {
			master = n
		}
		if n.Network.DHCP && dhcp.Name == "" {
			dhcp = n
		}
	}
	if master.Name == "" || dhcp.Name == "" {
		t.Fatal("the example site has no master or no DHCP node")
	}
	got := nodeFile(s, master).SiteNodes
	if len(got) != len(s.Nodes) || got[dhcp.Name] != "" || got[master.Name] != master.IP().String() {
		t.Errorf("siteNodes %v, want every node, %s with no address, %s at %s", got, dhcp.Name, master.Name, master.IP())
	}
	if nodeFile(s, dhcp).SiteNodes != nil {
		t.Errorf("a worker's node file lists the site's nodes")
	}
	for _, n := range []site.Node{master, dhcp} {
		var has bool
		for _, g := range grantsFor(n) {
			has = has || strings.HasSuffix(g.to, "/kubelet-server.crt")
		}
		if want := n.IP().IsValid(); has != want {
			t.Errorf("%s: kubelet-server.crt granted %v, want %v", n.Name, has, want)
		}
	}
}

// groupsOf are the groups (O) of a kubeconfig's current client certificate.
func groupsOf(t *testing.T, data []byte) []string {
	t.Helper()
	kc, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	user := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]
	b, _ := pem.Decode(user.ClientCertificateData)
	if b == nil {
		t.Fatal("no client certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.Subject.Organization
}

// The operator's admin.kubeconfig is in the cluster-admins group, which
// RBAC can take away; the system:masters break-glass is written beside
// it, root-only, and neither is on any node.
func TestOperatorCredentials(t *testing.T) {
	s := exampleSite(t)
	st := freshPKI(t, s)
	out := filepath.Join(t.TempDir(), "site")
	if _, err := Generate(s, st, out); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file  string
		group string
	}{
		{AdminKubeconfig, nodefile.ClusterAdminsGroup},
		{SuperAdminKubeconfig, "system:masters"},
	} {
		data, err := os.ReadFile(filepath.Join(out, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		if got := groupsOf(t, data); !slices.Equal(got, []string{tc.group}) {
			t.Errorf("%s: groups %v, want %s", tc.file, got, tc.group)
		}
		if fi, _ := os.Stat(filepath.Join(out, tc.file)); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v", tc.file, fi.Mode())
		}
	}
	for _, stem := range []string{pki.AdminStem, pki.SuperAdminStem} {
		p, err := st.Pair(stem)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range s.Nodes {
			data, err := Render(s, st, n)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range decode(t, data).Storage.Files {
				body := contents(t, f)
				if bytes.Contains(body, p.Key) || bytes.Contains(body, []byte(base64.StdEncoding.EncodeToString(p.Key))) {
					t.Errorf("%s:%s holds the %s key", n.Name, f.Path, stem)
				}
			}
		}
	}
}

// The only system:masters credential on a node is a master's own agent
// kubeconfig; a worker has none.
func TestOnlyTheMastersAgentIsSystemMasters(t *testing.T) {
	s := exampleSite(t)
	st := freshPKI(t, s)
	for _, n := range s.Nodes {
		data, err := Render(s, st, n)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range decode(t, data).Storage.Files {
			if !strings.HasPrefix(f.Path, KubeconfigDir+"/") {
				continue
			}
			masters := slices.Contains(groupsOf(t, contents(t, f)), "system:masters")
			if want := n.IsMaster() && f.Path == nodefile.AgentKubeconfig; masters != want {
				t.Errorf("%s:%s in system:masters: %v, want %v", n.Name, f.Path, masters, want)
			}
		}
	}
}

// A master's controller-manager and scheduler reach its own apiserver
// (a rollout never makes them newer than the apiserver they talk to);
// the kubelet and the agent reach any master through the discovery name.
func TestKubeconfigServers(t *testing.T) {
	s := exampleSite(t)
	st := freshPKI(t, s)
	local := "https://127.0.0.1:" + fmt.Sprint(s.Cluster.APIServerPort)
	discovered := "https://" + s.Cluster.DiscoveryName + ":" + fmt.Sprint(s.Cluster.APIServerPort)
	for _, n := range s.Nodes {
		data, err := Render(s, st, n)
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, f := range decode(t, data).Storage.Files {
			if !strings.HasPrefix(f.Path, KubeconfigDir+"/") {
				continue
			}
			cfg, err := clientcmd.Load(contents(t, f))
			if err != nil {
				t.Fatalf("%s:%s: %v", n.Name, f.Path, err)
			}
			want := discovered
			if base := path.Base(f.Path); base == "controller-manager.conf" || base == "scheduler.conf" {
				want, seen = local, seen+1
			}
			for name, c := range cfg.Clusters {
				if c.Server != want {
					t.Errorf("%s:%s cluster %s: server %s, want %s", n.Name, f.Path, name, c.Server, want)
				}
			}
		}
		if want := map[bool]int{true: 2, false: 0}[n.IsMaster()]; seen != want {
			t.Errorf("%s: %d controller-manager and scheduler kubeconfigs, want %d", n.Name, seen, want)
		}
	}
}
