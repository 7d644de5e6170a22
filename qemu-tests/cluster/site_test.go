package cluster

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/registries"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/certtest"
)

func TestTopologiesRenderEveryNode(t *testing.T) {
	tests := []struct {
		name  string
		tp    Topology
		nodes map[string]struct{ role, mac, addr string }
		pods  int
	}{
		{"three nodes", ThreeNodes(), map[string]struct{ role, mac, addr string }{
			"m1": {"genesis", M1MAC, M1Addr}, "m2": {"master", M2MAC, M2Addr}, "w1": {"worker", W1MAC, W1Addr}}, 21},
		{"two nodes", TwoNodes(), map[string]struct{ role, mac, addr string }{
			"m1": {"genesis", M1MAC, M1Addr}, "w1": {"worker", W1MAC, W1Addr}}, 13},
		{"two nodes, w1 by DHCP", TwoNodes().WithDHCP("w1", "m1"), map[string]struct{ role, mac, addr string }{
			"m1": {"genesis", M1MAC, M1Addr}, "w1": {"worker", W1MAC, ""}}, 13},
		{"three masters and a worker", ThreeMastersAndWorker(), map[string]struct{ role, mac, addr string }{
			"m1": {"genesis", M1MAC, M1Addr}, "m2": {"master", M2MAC, M2Addr}, "m3": {"master", M3MAC, M3Addr}, "w1": {"worker", W1MAC, W1Addr}}, 29},
		{"the master role moved from m2 to w1", ThreeMastersAndWorker().WithRole("w1", "master", "m2"), map[string]struct{ role, mac, addr string }{
			"m1": {"genesis", M1MAC, M1Addr}, "m3": {"master", M3MAC, M3Addr}, "w1": {"master", W1MAC, W1Addr}}, 25},
		{"the soak's masters before w1 powers on", ThreeMastersAndWorker().Without("w1"), map[string]struct{ role, mac, addr string }{
			"m1": {"genesis", M1MAC, M1Addr}, "m2": {"master", M2MAC, M2Addr}, "m3": {"master", M3MAC, M3Addr}}, 25},
		{"the soak's cluster with m3 gone", ThreeMastersAndWorker().Without("m3"), map[string]struct{ role, mac, addr string }{
			"m1": {"genesis", M1MAC, M1Addr}, "m2": {"master", M2MAC, M2Addr}, "w1": {"worker", W1MAC, W1Addr}}, 21},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := site.Parse("cluster.yaml", []byte(tt.tp.Site()))
			if err != nil {
				t.Fatalf("the site does not validate: %v\n%s", err, tt.tp.Site())
			}
			if len(s.Nodes) != len(tt.nodes) {
				t.Fatalf("%d nodes, want %d", len(s.Nodes), len(tt.nodes))
			}
			for _, n := range s.Nodes {
				w, ok := tt.nodes[n.Name]
				if !ok || n.Role != w.role || len(n.MACs) != 1 || !strings.EqualFold(n.MACs[0], w.mac) || n.Network.Address != w.addr || n.Network.DHCP != (w.addr == "") || (w.addr != "" && n.Network.Gateway != Gateway) {
					t.Errorf("node %s: %+v, want %+v", n.Name, n, w)
				}
				if n.Name != "w1" {
					continue
				}
				if got, ok := n.Labels["node-role.kubernetes.io/worker"]; !ok || got != "" {
					t.Errorf("w1's worker role label %q (%v)", got, ok)
				}
				if got := n.Labels["kiln.dev/pool"]; got != "edge" {
					t.Errorf("w1's pool label %q", got)
				}
			}
			if got := tt.tp.KubeSystemPods(); got != tt.pods {
				t.Errorf("KubeSystemPods() = %d, want %d", got, tt.pods)
			}
			cfgs, err := Configs(tt.tp.Site(), filepath.Join(t.TempDir(), "pki"))
			if err != nil {
				t.Fatal(err)
			}
			for name := range tt.nodes {
				if len(cfgs[name]) == 0 {
					t.Errorf("no config for %s", name)
				}
			}
		})
	}
}

func TestHasWorkerAsksNameAndRole(t *testing.T) {
	tests := []struct {
		tp   Topology
		name string
		want bool
	}{
		{ThreeNodes(), "w1", true},
		{ThreeNodes(), "m2", false},
		{ThreeNodes().Without("w1"), "w1", false},
		{ThreeNodes().WithRole("w1", "master"), "w1", false},
	}
	for _, tt := range tests {
		if got := tt.tp.HasWorker(tt.name); got != tt.want {
			t.Errorf("HasWorker(%s) of %v = %v, want %v", tt.name, tt.tp.Names(), got, tt.want)
		}
	}
}

func TestNetnsClientDialsTheServerAsWritten(t *testing.T) {
	cfgs, err := Configs(ThreeNodes().Site(), filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := File(cfgs["m1"], nodefile.AgentKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var dialed []string
	refused := errors.New("test dialer: not connecting")
	kube, rc, err := NetnsClient(admin, "", func(_ context.Context, network, addr string) (net.Conn, error) {
		dialed = append(dialed, network+" "+addr)
		return nil, refused
	})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(rc.Host)
	if err != nil || u.Host != site.DefaultDiscoveryName+":6443" {
		t.Fatalf("server %q, want the discovery name as written", rc.Host)
	}
	if _, err := kube.Discovery().ServerVersion(); !errors.Is(err, refused) && (err == nil || !strings.Contains(err.Error(), refused.Error())) {
		t.Fatalf("ServerVersion: %v, want the test dialer's error", err)
	}
	if len(dialed) == 0 || dialed[0] != "tcp "+site.DefaultDiscoveryName+":6443" {
		t.Fatalf("dialed %v, want tcp %s:6443", dialed, site.DefaultDiscoveryName)
	}
	if _, _, err := NetnsClient(admin, "no-such-context", nil); err == nil {
		t.Error("an unknown context was accepted")
	}
}

// Two renders of one site are two PKIs: the foreign-master scenario
// depends on it.
func TestHostGenesisSiteRendersTwoPKIs(t *testing.T) {
	var cas [2][]byte
	for i := range cas {
		cfgs, err := Configs(HostGenesisSite(), filepath.Join(t.TempDir(), "pki"))
		if err != nil {
			t.Fatalf("the site does not render: %v\n%s", err, HostGenesisSite())
		}
		if cas[i], err = File(cfgs["m3"], "/etc/kiln/pki/etcd/ca.crt"); err != nil {
			t.Fatal(err)
		}
		if _, err := File(cfgs["h1"], "/etc/kiln/pki/apiserver-etcd-client.crt"); err != nil {
			t.Fatal(err)
		}
	}
	if string(cas[0]) == string(cas[1]) {
		t.Error("two renders share an etcd CA")
	}
}

// The genesis bench's site carries the timing profile it is asked for.
func TestGenesisSiteTimed(t *testing.T) {
	for _, timing := range []string{"", site.TimingDefault, site.TimingSlow} {
		s, err := site.Parse("genesis.yaml", []byte(GenesisSiteTimed(timing)))
		if err != nil {
			t.Fatalf("timing %q: %v", timing, err)
		}
		want := timing
		if want == "" {
			want = site.TimingDefault
		}
		if s.Cluster.Timing != want || len(s.Nodes) != 1 {
			t.Errorf("timing %q: the site has timing %q and %d node(s), want %q and 1", timing, s.Cluster.Timing, len(s.Nodes), want)
		}
	}
}

// A topology's mirror reaches every node's config, and stays in the site
// as machines change roles or leave.
func TestTopologyMirrorsReachEveryNode(t *testing.T) {
	serving, err := certtest.NewServing(Gateway)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "mirror-ca.pem")
	if err := os.WriteFile(caFile, serving.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	tp := ThreeNodes()
	tp.Mirrors = []Mirror{{Upstream: "docker.io", URL: "https://" + Gateway + ":5000", CAFile: caFile}}
	for _, changed := range []Topology{tp.WithRole("w1", "master"), tp.Without("m2")} {
		if len(changed.Mirrors) != 1 || changed.Mirrors[0] != tp.Mirrors[0] {
			t.Errorf("the topology of %v lost its mirror: %+v", changed.Names(), changed.Mirrors)
		}
	}
	cfgs, err := Configs(tp.Site(), filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatalf("%v\n%s", err, tp.Site())
	}
	hostDir := registries.HostDir("docker.io")
	for _, name := range tp.Names() {
		hosts, err := File(cfgs[name], hostDir+"/hosts.toml")
		if err != nil || !strings.Contains(string(hosts), `[host."https://10.77.0.1:5000"]`) {
			t.Errorf("%s: hosts.toml %q, %v", name, hosts, err)
		}
		ca, err := File(cfgs[name], hostDir+"/"+registries.CAName(Gateway+":5000"))
		if err != nil || string(ca) != string(serving.CAPEM) {
			t.Errorf("%s: the mirror's CA %q, %v", name, ca, err)
		}
		if daemon, err := File(cfgs[name], registries.DockerDaemonConfig); err != nil || !strings.Contains(string(daemon), `"https://10.77.0.1:5000"`) {
			t.Errorf("%s: daemon.json %q, %v", name, daemon, err)
		}
	}
}
