package netns

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// DHCP is the segment's DHCP server: dnsmasq inside the namespace,
// answering on the bridge, with DNS off. It is what a site's own network
// gives a machine that boots from its NIC: an address, and the boot file
// the firmware's iPXE loads (an http:// URL, which iPXE fetches itself).
type DHCP struct {
	cmd  *exec.Cmd
	done chan error
	// Log is dnsmasq's log (every DHCP exchange, --log-dhcp).
	Log string
}

// ServeDHCP starts dnsmasq on the bridge. fixed gives a machine (by MAC)
// its address, as a site's static lease would; other machines get one
// from .100-.149 of the bridge's /24. bootFile is the file every answer
// names. dir holds the lease file and the log. Stop it with Stop.
func (n *Net) ServeDHCP(dir, bootFile string, fixed map[string]netip.Addr) (*DHCP, error) {
	if _, err := exec.LookPath("dnsmasq"); err != nil {
		return nil, fmt.Errorf("netns %s: DHCP needs dnsmasq (Debian's dnsmasq-base; scripts/host-deps.sh installs it): %w", n.Name, err)
	}
	base := n.BridgeAddr.Masked().Addr().As4()
	if n.BridgeAddr.Bits() != 24 {
		return nil, fmt.Errorf("netns %s: DHCP hands out .100-.149 of a /24, and the bridge is %s", n.Name, n.BridgeAddr)
	}
	first, last := base, base
	first[3], last[3] = 100, 149
	d := &DHCP{Log: filepath.Join(dir, "dnsmasq.log"), done: make(chan error, 1)}
	args := []string{
		"--keep-in-foreground", "--conf-file=/dev/null", "--user=root", "--pid-file=",
		"--port=0", // no DNS: the nodes resolve through their own node-local DNS
		"--interface=" + Bridge, "--bind-interfaces", "--dhcp-authoritative",
		fmt.Sprintf("--dhcp-range=%s,%s,255.255.255.0,1h", netip.AddrFrom4(first), netip.AddrFrom4(last)),
		"--dhcp-option=option:router", // no default route: nothing leaves the segment
		"--dhcp-boot=" + bootFile,
		"--dhcp-leasefile=" + filepath.Join(dir, "dnsmasq.leases"),
		"--log-dhcp", "--log-facility=" + d.Log,
	}
	macs := make([]string, 0, len(fixed))
	for mac := range fixed {
		macs = append(macs, mac)
	}
	sort.Strings(macs)
	for _, mac := range macs {
		args = append(args, "--dhcp-host="+strings.ToLower(mac)+","+fixed[mac].String())
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	d.cmd = exec.Command("ip", append([]string{"netns", "exec", n.Name, "dnsmasq"}, args...)...)
	out, err := os.Create(filepath.Join(dir, "dnsmasq.out"))
	if err != nil {
		return nil, err
	}
	d.cmd.Stdout, d.cmd.Stderr = out, out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no DHCP server outlives its test
	if err := d.cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("netns %s: starting dnsmasq: %w", n.Name, err)
	}
	go func() { d.done <- d.cmd.Wait(); out.Close() }()
	// dnsmasq binds at once or exits: a short look tells a bad argument
	// from a running server.
	select {
	case err := <-d.done:
		msg, _ := os.ReadFile(out.Name())
		return nil, fmt.Errorf("netns %s: dnsmasq exited at start: %v: %s", n.Name, err, strings.TrimSpace(string(msg)))
	case <-time.After(time.Second):
	}
	return d, nil
}

// Stop ends dnsmasq and waits for it (bounded: it is killed after 5 s).
func (d *DHCP) Stop() error {
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return nil
	case <-time.After(5 * time.Second):
		d.cmd.Process.Kill()
		<-d.done
		return fmt.Errorf("dnsmasq did not stop on SIGTERM within 5 s: killed")
	}
}
