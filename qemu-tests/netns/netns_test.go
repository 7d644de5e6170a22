package netns

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kiln-project/kiln/internal/retry"
)

const testCIDR = "10.77.0.1/24"

// newNet makes a namespace for one test, deleted when it ends, or skips
// the test where namespaces cannot be made.
func newNet(t *testing.T, name string) *Net {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root: run as root to test package netns")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("iproute2's ip is not installed")
	}
	n, err := New(fmt.Sprintf("%s%d", name, os.Getpid()), testCIDR)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	return n
}

func TestDialReachesAListenerInsideOnly(t *testing.T) {
	n := newNet(t, "u")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	// A listener inside the namespace, made by another program (python3
	// under ip netns exec), so the test does not only talk to itself.
	py := n.Command(ctx, "python3", "-c", `
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.77.0.1", 7777)); s.listen(1); print("listening", flush=True)
c, _ = s.accept(); c.sendall(b"echo:" + c.recv(64)); c.close()
`)
	stdout, err := py.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	py.Stderr = os.Stderr
	if err := py.Start(); err != nil {
		t.Skipf("python3 inside the namespace: %v", err)
	}
	defer py.Wait()
	defer py.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "listening\n" {
		t.Fatalf("waiting for the python3 listener to say it listens: %q %v", line, err)
	}

	c, err := n.DialContext(ctx, "tcp", "10.77.0.1:7777")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	k, err := c.Read(buf)
	if err != nil || string(buf[:k]) != "echo:hi" {
		t.Fatalf("reply %q %v, want echo:hi", buf[:k], err)
	}

	// Outside, the address does not exist. Proven without sending a
	// packet (a dial from here would follow the host's default route):
	// binding it fails, and no host interface carries it.
	l, err := net.Listen("tcp", "10.77.0.1:0")
	if err == nil {
		l.Close()
		t.Fatal("10.77.0.1 can be bound in the host's namespace: the bridge address leaked out")
	}
	if !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Fatalf("binding 10.77.0.1 outside: %v, want EADDRNOTAVAIL", err)
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if strings.HasPrefix(a.String(), "10.77.0.1/") {
			t.Fatalf("host interface address %s", a)
		}
	}
	// Every thread of the process is back in the host's namespace: the
	// thread that dialed switched back before it was reused.
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if ns, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net"); err == nil && ns != self {
			t.Errorf("thread %s is in %s, the process in %s", task.Name(), ns, self)
		}
	}
}

func TestListenAndDialByName(t *testing.T) {
	n := newNet(t, "l")
	l, err := n.Listen("tcp", "10.77.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Write([]byte("x"))
			c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := n.DialContext(ctx, "tcp", fmt.Sprintf("api.test.internal:%d", port)); err == nil || !strings.Contains(err.Error(), "AddHost") {
		t.Fatalf("dialing an unknown name: %v, want an error naming AddHost", err)
	}
	n.AddHost("api.test.internal", netip.MustParseAddr("10.77.0.1"))
	c, err := n.DialContext(ctx, "tcp", fmt.Sprintf("api.test.internal:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestAddTapEnslavesToBridge(t *testing.T) {
	n := newNet(t, "a")
	if err := n.AddTap("kt-m1"); err != nil {
		t.Fatal(err)
	}
	link, err := n.Link("kt-m1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"master " + Bridge, "tun type tap", "UP"} {
		if !strings.Contains(link, want) {
			t.Errorf("tap kt-m1 lacks %q:\n%s", want, link)
		}
	}
	if err := n.AddTap("a-name-too-long-for-linux"); err == nil {
		t.Error("a 25-character tap name was accepted")
	}
	// The tap is not in the host's namespace.
	if _, err := net.InterfaceByName("kt-m1"); err == nil {
		t.Error("tap kt-m1 exists in the host's namespace")
	}
}

func TestCloseDeletesAndIsIdempotent(t *testing.T) {
	n := newNet(t, "c")
	if err := n.AddTap("kt-c"); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), n.Name) {
		t.Fatalf("ip netns list still shows %s:\n%s", n.Name, out)
	}
}

func TestNewRemovesStaleNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	// A namespace as a crashed run leaves it: no live owner.
	stale := fmt.Sprintf("%ss%d", Prefix, os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", stale).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", stale).Run() })
	if err := os.MkdirAll(ownerDir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(ownerDir+"/"+stale, []byte("999999999 1\n"), 0o644)
	n := newNet(t, "n")
	if Exists(stale) {
		t.Fatalf("New left the stale namespace %s", stale)
	}
	if !Exists(n.Name) {
		t.Fatalf("%s does not exist", n.Name)
	}
	// A live owner's namespace is kept.
	if removed, err := RemoveStale(); err != nil || len(removed) > 0 && contains(removed, n.Name) {
		t.Fatalf("RemoveStale removed %v (%v), including a live one", removed, err)
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// DropTCP makes a bridged port time out, as the cluster scenario needs
// of a master's etcd port, and lifting it lets the same connection
// through: two namespaces of the test's own behind the bridge, one
// listening, one dialling.
func TestDropTCPTimesOutABridgedPortUntilLifted(t *testing.T) {
	n := newNet(t, "d")
	var ends []string
	for i, addr := range []string{"10.77.0.21/24", "10.77.0.22/24"} {
		end := fmt.Sprintf("%se%d-%d", Prefix, i, os.Getpid())
		ends = append(ends, end)
		veth := fmt.Sprintf("vd%d", i)
		t.Cleanup(func() { run("ip", "netns", "del", end) })
		for _, args := range [][]string{
			{"netns", "add", end},
			{"-n", n.Name, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", end},
			{"-n", n.Name, "link", "set", veth, "master", Bridge},
			{"-n", n.Name, "link", "set", veth, "up"},
			{"-n", end, "addr", "add", addr, "dev", "eth0"},
			{"-n", end, "link", "set", "eth0", "up"},
		} {
			if err := run("ip", args...); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	listener := exec.CommandContext(ctx, "ip", "netns", "exec", ends[1], "python3", "-c", `
import socket
s = socket.socket(); s.bind(("10.77.0.22", 2379)); s.listen(8)
while True: s.accept()[0].close()
`)
	if err := listener.Start(); err != nil {
		t.Fatal(err)
	}
	defer listener.Process.Kill()
	dial := func() error {
		return exec.CommandContext(ctx, "ip", "netns", "exec", ends[0], "python3", "-c", `
import socket
s = socket.create_connection(("10.77.0.22", 2379), timeout=3)
`).Run()
	}
	if err := retry.WaitEvery(ctx, "the listener in "+ends[1], 10*time.Second, 200*time.Millisecond, nil, func(context.Context) error { return dial() }); err != nil {
		t.Fatalf("before the rule: %v", err)
	}
	lift, err := n.DropTCP(netip.MustParseAddr("10.77.0.22"), 2379)
	if err != nil {
		t.Fatal(err)
	}
	if err := dial(); err == nil {
		t.Fatal("a dropped port answered")
	}
	if err := lift(); err != nil {
		t.Fatal(err)
	}
	// Retried like the first dial: on a loaded host one connect can take
	// longer than its 3 s, rule or not; a rule left in place fails them all.
	if err := retry.WaitEvery(ctx, "the listener after lifting the rule", 10*time.Second, 200*time.Millisecond, nil, func(context.Context) error { return dial() }); err != nil {
		t.Fatalf("after lifting the rule: %v", err)
	}
}
