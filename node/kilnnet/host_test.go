package kilnnet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// netnsEnv names the throwaway network namespace the helper runs in.
const netnsEnv = "KILN_NET_TEST_NETNS"

// TestRealRoutesAndRulesInANetns runs kiln-net's real ip and iptables
// implementation inside a throwaway network namespace (the host's routes
// and rules are never touched): this test binary, re-executed under
// `ip netns exec`, runs TestNetnsHelper there.
func TestRealRoutesAndRulesInANetns(t *testing.T) {
	if os.Getenv(netnsEnv) != "" {
		t.Skip("inside the namespace: TestNetnsHelper runs")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	for _, bin := range []string{"ip", "iptables", "iptables-restore"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s (apt-get install iproute2 iptables)", bin)
		}
	}
	ns := fmt.Sprintf("kiln-nt-%d", os.Getpid())
	ctx := context.Background()
	if _, err := run(ctx, "", "ip", "netns", "add", ns); err != nil {
		t.Skipf("cannot make a network namespace here: %v", err)
	}
	t.Cleanup(func() {
		if _, err := run(context.Background(), "", "ip", "netns", "del", ns); err != nil {
			t.Errorf("removing the test namespace: %v", err)
		}
	})
	tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(tctx, "ip", "netns", "exec", ns, os.Args[0], "-test.run", "^TestNetnsHelper$", "-test.v", "-test.count=1")
	from, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), netnsEnv+"="+ns, netnsEnv+"_FROM="+from)
	out, err := cmd.CombinedOutput()
	t.Logf("in namespace %s:\n%s", ns, out)
	if err != nil || !strings.Contains(string(out), "--- PASS: TestNetnsHelper") {
		t.Fatalf("the helper in the namespace failed: %v", err)
	}
}

// TestNetnsHelper is the real half of TestRealRoutesAndRulesInANetns; it
// does nothing unless run by it inside its namespace.
func TestNetnsHelper(t *testing.T) {
	ns := os.Getenv(netnsEnv)
	if ns == "" {
		t.Skip("run by TestRealRoutesAndRulesInANetns inside a throwaway namespace")
	}
	// the namespace must be the throwaway one, not the one the test started in
	self, err1 := os.Stat("/proc/self/ns/net")
	made, err2 := os.Stat("/run/netns/" + ns)
	cur, _ := os.Readlink("/proc/self/ns/net")
	if err1 != nil || err2 != nil || !os.SameFile(self, made) || cur == os.Getenv(netnsEnv+"_FROM") {
		t.Fatalf("not in namespace %s (%s; %v %v): refusing to touch this network", ns, cur, err1, err2)
	}
	ctx := context.Background()
	sh := func(args ...string) string {
		t.Helper()
		out, err := run(ctx, "", args[0], args[1:]...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	sh("ip", "link", "set", "lo", "up")
	// the node's link: a dummy interface, or a veth pair where the kernel has no dummy driver
	link := "kiln-d0"
	if _, err := run(ctx, "", "ip", "link", "add", link, "type", "dummy"); err != nil {
		link = "kiln-v0"
		sh("ip", "link", "add", link, "type", "veth", "peer", "name", "kiln-v1")
		sh("ip", "link", "set", "kiln-v1", "up")
	}
	sh("ip", "link", "set", link, "up")
	sh("ip", "addr", "add", "10.78.0.1/24", "dev", link)
	// what an operator and Docker did on the node
	sh("ip", "route", "add", "10.99.0.0/24", "via", "10.78.0.254", "proto", "static")
	sh("ip", "route", "add", "10.244.9.0/24", "via", "10.78.0.254", "proto", "static")
	sh("iptables", "-P", "FORWARD", "DROP")

	s, kube, _, _, log := newSyncer(t,
		node("m1", "10.244.0.0/24", internal("10.78.0.1")),
		node("m2", "10.244.1.0/24", internal("10.78.0.12")),
		node("m3", "10.244.2.0/24", internal("10.78.0.13")),
		node("m4", "10.244.9.0/24", internal("10.78.0.14"))) // the operator's route has its CIDR
	s.ClusterCIDR = netip.MustParsePrefix("10.244.0.0/16")
	s.Routes, s.Firewall = IPRoutes{}, Iptables{}
	pass := func() {
		t.Helper()
		n := len(log.lines)
		if err := s.sync(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("pass:\n  %s", strings.Join(log.lines[n:], "\n  "))
	}
	routes := func() map[string]string {
		t.Helper()
		var rows []struct{ Dst, Gateway, Protocol string }
		if err := json.Unmarshal([]byte(sh("ip", "-j", "-4", "route", "show", "table", "main")), &rows); err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, r := range rows {
			if r.Gateway != "" {
				m[r.Dst] = r.Gateway + " proto " + r.Protocol
			}
		}
		return m
	}
	check := func(want map[string]string) {
		t.Helper()
		got := routes()
		for dst, w := range want {
			if got[dst] != w {
				t.Errorf("route %s: %q, want %q", dst, got[dst], w)
			}
		}
		for dst, g := range got {
			if _, ok := want[dst]; !ok {
				t.Errorf("route %s %s: not wanted", dst, g)
			}
		}
	}
	operator := map[string]string{"10.99.0.0/24": "10.78.0.254 proto static", "10.244.9.0/24": "10.78.0.254 proto static"}
	with := func(m map[string]string) map[string]string {
		for k, v := range operator {
			m[k] = v
		}
		return m
	}

	pass()
	check(with(map[string]string{"10.244.1.0/24": "10.78.0.12 proto 75", "10.244.2.0/24": "10.78.0.13 proto 75"}))
	if !strings.Contains(log.String(), "route 10.244.1.0/24 via 10.78.0.12 (node m2) added") ||
		!strings.Contains(log.String(), "route 10.244.9.0/24 via 10.78.0.14 (node m4): ip -4 route add") {
		t.Errorf("the log does not say what changed and what failed:\n%s", log)
	}

	if err := kube.CoreV1().Nodes().Delete(ctx, "m3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pass()
	check(with(map[string]string{"10.244.1.0/24": "10.78.0.12 proto 75"}))
	if !strings.Contains(log.String(), "route 10.244.2.0/24 via 10.78.0.13 removed (node m3 is gone or has another pod CIDR)") {
		t.Errorf("no removal logged:\n%s", log)
	}

	forward := func() []string {
		var rules []string
		for _, l := range strings.Split(sh("iptables", "-S", "FORWARD"), "\n") {
			if strings.HasPrefix(l, "-A ") {
				rules = append(rules, l)
			}
		}
		return rules
	}
	if f := forward(); len(f) == 0 || f[0] != "-A FORWARD -j KILN-FORWARD" {
		t.Errorf("FORWARD %q: the jump to KILN-FORWARD is not first", f)
	}
	sh("iptables", "-I", "FORWARD", "1", "-j", "DROP") // as Docker does, above kiln's jump
	pass()
	if f := forward(); len(f) != 2 || f[0] != "-A FORWARD -j KILN-FORWARD" || f[1] != "-A FORWARD -j DROP" {
		t.Errorf("FORWARD %q: want the jump to KILN-FORWARD first, once, then the DROP", f)
	}
	if got, want := sh("iptables", "-S", "KILN-FORWARD"),
		"-N KILN-FORWARD\n-A KILN-FORWARD -s 10.244.0.0/16 -j ACCEPT\n-A KILN-FORWARD -d 10.244.0.0/16 -j ACCEPT\n"; got != want {
		t.Errorf("KILN-FORWARD:\n%s\nwant:\n%s", got, want)
	}
	if !strings.Contains(log.String(), "jump to KILN-FORWARD moved back to the top of FORWARD (filter): it had become rule 2") {
		t.Errorf("the move is not logged:\n%s", log)
	}

	n := len(log.lines)
	pass()
	if len(log.lines) != n {
		t.Errorf("a pass with nothing to do changed: %q", log.lines[n:])
	}
	nat := sh("iptables", "-t", "nat", "-S")
	if c := strings.Count(nat, "-A KILN-POSTROUTING -s 10.244.0.0/16 ! -d 10.244.0.0/16 -j MASQUERADE\n"); c != 1 {
		t.Errorf("the MASQUERADE rule is there %d times, want once:\n%s", c, nat)
	}
	if c := strings.Count(nat, "-A POSTROUTING -j KILN-POSTROUTING\n"); c != 1 || strings.Count(nat, "-A ") != 2 {
		t.Errorf("nat, want the jump once and the one rule:\n%s", nat)
	}
	check(with(map[string]string{"10.244.1.0/24": "10.78.0.12 proto 75"}))

	// the chain's content is restored when something changed it
	sh("iptables", "-A", "KILN-FORWARD", "-j", "DROP")
	pass()
	if got := sh("iptables", "-S", "KILN-FORWARD"); strings.Contains(got, "DROP") {
		t.Errorf("KILN-FORWARD kept a foreign rule:\n%s", got)
	}
	if conf, err := os.ReadFile(filepath.Join(s.ConfDir, ConfName)); err != nil || !strings.Contains(string(conf), `"ipMasq": false`) {
		t.Errorf("conflist: %s %v", conf, err)
	}
}
