package qemutests

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
	"github.com/kiln-project/kiln/qemu-tests/netns"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

// netcheckScript waits (bounded) for the node's own static address, then
// for the peer, and reports on the console: 3 pings, or, if the image has
// no ping, 3 TCP connections to the peer's sshd (bash's /dev/tcp).
const netcheckScript = `#!/bin/bash
self=$1 peer=$2
say() { echo "netcheck: $*" > /dev/ttyS0; }
for i in $(seq 60); do ip -4 -o addr show | grep -q " $self/" && break; sleep 2; done
say "self=$self addr=$(ip -4 -o addr show | grep -c " $self/")"
if command -v ping >/dev/null; then
	method=ping; probe() { ping -c 3 -W 2 "$peer" >/dev/null 2>&1; }
else
	method=tcp22; probe() { for k in 1 2 3; do timeout 3 bash -c "exec 3<>/dev/tcp/$peer/22 && head -c 7 <&3" | grep -q SSH-2.0 || return 1; done; }
fi
# The peer boots at its own pace: up to 10 minutes.
for i in $(seq 120); do
	if probe; then say "peer=ok method=$method tries=$i"; exit 0; fi
	sleep 5
done
say "peer=failed method=$method"; ip -o addr > /dev/ttyS0; ip neigh > /dev/ttyS0
exit 1
`

// netcheckConfig gives the NIC with mac a static address (matched by MAC,
// before the image's DHCP default) and runs the check against peer.
func netcheckConfig(t *testing.T, mac, addr, peer string) []byte {
	self, _, _ := strings.Cut(addr, "/")
	network := "[Match]\nMACAddress=" + mac + "\n\n[Network]\nAddress=" + addr + "\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n"
	unit := "[Unit]\nDescription=kiln test: reach the peer on the bridge\nWants=network-online.target\nAfter=network-online.target kiln-firstboot.service\n\n" +
		"[Service]\nType=oneshot\nExecStart=/bin/bash /etc/kiln-test/netcheck.sh " + self + " " + peer + "\n\n[Install]\nWantedBy=multi-user.target\n"
	data := func(s string) map[string]any {
		return map[string]any{"source": "data:;base64," + base64.StdEncoding.EncodeToString([]byte(s))}
	}
	return mustJSON(t, map[string]any{
		"ignition": map[string]any{"version": "3.4.0"},
		"storage": map[string]any{"files": []any{
			map[string]any{"path": "/etc/systemd/network/10-netcheck.network", "mode": 0o644, "contents": data(network)},
			map[string]any{"path": "/etc/kiln-test/netcheck.sh", "mode": 0o755, "contents": data(netcheckScript)},
		}},
		"systemd": map[string]any{"units": []any{
			map[string]any{"name": "kiln-test-netcheck.service", "enabled": true, "contents": unit},
		}},
	})
}

// TestTwoVMsShareABridge boots two nodes from the ISO on taps of one
// namespace's bridge; each reaches the other, and the test reaches one
// through the namespace. Nothing of it exists outside the namespace. It
// checks the harness itself (5 min under TCG); the cluster scenario
// depends on the same bridge, so make test leaves it to
// KILN_QEMU_HARNESS=1.
func TestTwoVMsShareABridge(t *testing.T) {
	if os.Getenv("KILN_QEMU_HARNESS") != "1" {
		t.Skip("the harness's own two-VM check runs with KILN_QEMU_HARNESS=1; the cluster scenario uses the same bridge")
	}
	out := outDir(t)
	dir := logDir(t, out)
	n, err := netns.New(fmt.Sprintf("q%d", os.Getpid()), cluster.BridgeCIDR)
	if err != nil {
		t.Fatal(err)
	}
	// Registered before the VMs: cleanups run last-first, so QEMU has
	// stopped when the namespace goes.
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("namespace %s, bridge %s %s", n.Name, netns.Bridge, cluster.BridgeCIDR)

	type node struct{ name, tap, mac, addr, peer string }
	nodes := []node{
		{"a", "kt-a", cluster.M1MAC, cluster.M1Addr, "10.77.0.12"},
		{"b", "kt-b", cluster.M2MAC, cluster.M2Addr, "10.77.0.11"},
	}
	vms := map[string]*vm.VM{}
	for _, nd := range nodes {
		if err := n.AddTap(nd.tap); err != nil {
			t.Fatal(err)
		}
		// 1 GiB: with 768 MiB the ISO's RAM overlay filled up about 2
		// minutes into the boot, which can take sshd's host keys with it.
		v := startVM(t, vm.Config{Name: "l2-" + nd.name, Dir: filepath.Join(dir, nd.name), Firmware: vm.BIOS, Boot: vm.BootISO, Direct: true,
			MemoryMiB: 1024, CPUs: 1, ISO: filepath.Join(out, "node.iso"), Netns: n.Name, Tap: nd.tap, MAC: nd.mac,
			Ignition: netcheckConfig(t, nd.mac, nd.addr, nd.peer)})
		vms[nd.name] = v
		// ip netns exec execs QEMU: the process PowerCut kills is QEMU.
		var comm []byte
		err := retry.Wait(t.Context(), "ip netns exec to exec QEMU", 10*time.Second, nil, func(context.Context) (err error) {
			comm, err = os.ReadFile(fmt.Sprintf("/proc/%d/comm", v.PID()))
			if err == nil && !strings.HasPrefix(string(comm), "qemu-system") {
				err = fmt.Errorf("pid %d is %q", v.PID(), strings.TrimSpace(string(comm)))
			}
			return err
		})
		if err != nil {
			t.Fatalf("VM %s: waiting for ip netns exec to exec QEMU: %v", v.Name, err)
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", v.PID())); err != nil || ns == selfNetns(t) {
			t.Fatalf("VM %s: QEMU's network namespace %q (%v) is the test's own", v.Name, ns, err)
		}
	}
	if link, err := n.Link("kt-a"); err != nil || !strings.Contains(link, "master "+netns.Bridge) {
		t.Fatalf("tap kt-a: %v\n%s", err, link)
	}

	// Both consoles are watched at once: WaitLine is also what retries a
	// VM under TCG when KVM fails on this host, and each VM's check needs
	// the other one booted.
	start := time.Now()
	lines := make([]string, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, nd := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lines[i], errs[i] = vms[nd.name].WaitLine(t.Context(), mustRe(`netcheck: peer=`), 15*time.Minute)
		}()
	}
	wg.Wait()
	for i, nd := range nodes {
		v := vms[nd.name]
		if errs[i] != nil {
			t.Errorf("VM %s: waiting for its netcheck line: %v", v.Name, errs[i])
			continue
		}
		t.Logf("VM %s: %s (%s after power-on)", v.Name, lines[i], v.Uptime().Round(time.Second))
		if !strings.Contains(lines[i], "peer=ok") {
			t.Errorf("VM %s could not reach %s: %s", v.Name, nd.peer, lines[i])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("both checks done %s after the VMs started", time.Since(start).Round(time.Second))

	// The test process reaches node a's sshd from inside the namespace.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var banner string
	err = retry.Wait(ctx, "node a's sshd through the namespace", time.Minute, t.Logf, func(ctx context.Context) error {
		c, err := n.DialContext(ctx, "tcp", "10.77.0.11:22")
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		banner, err = bufio.NewReader(c).ReadString('\n')
		return err
	})
	if err != nil || !strings.HasPrefix(banner, "SSH-2.0-") {
		t.Fatalf("sshd of VM a at 10.77.0.11:22 through namespace %s: banner %q, %v", n.Name, banner, err)
	}
	t.Logf("10.77.0.11:22 through the namespace: %s", strings.TrimSpace(banner))
	// And the node's address does not exist in the test's own namespace.
	if l, err := net.Listen("tcp", "10.77.0.11:0"); err == nil {
		l.Close()
		t.Error("10.77.0.11 is bindable in the host's namespace")
	}
}

func selfNetns(t *testing.T) string {
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}
