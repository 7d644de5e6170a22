// Package netns owns the throwaway layer-2 segments the multi-node QEMU
// tests run on: a Linux network namespace named kiln-t-*, a bridge inside
// it carrying the site's gateway address, and the tap devices the VMs'
// NICs use. A site's node addresses exist only inside that namespace;
// nothing is added to the host's own namespace. The test process reaches
// the nodes through DialContext, which opens its sockets inside the
// namespace, and runs programs there with Command. Deleting the
// namespace (Close) takes the bridge and the taps with it; namespaces
// left by a crashed run (owner process gone) are removed by New.
//
// Everything here needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Prefix starts the name of every namespace this package creates.
const Prefix = "kiln-t-"

// Bridge is the bridge's name inside every namespace.
const Bridge = "kbr0"

// Where iproute2 keeps named namespaces, and where this package records
// which process owns each of its namespaces.
const (
	runDir   = "/run/netns"
	ownerDir = "/run/kiln-netns"
)

// Net is one network namespace with a bridge.
type Net struct {
	Name       string       // the namespace's name, starting with Prefix
	BridgeAddr netip.Prefix // the bridge's address, e.g. 10.77.0.1/24

	mu     sync.Mutex
	hosts  map[string][]netip.Addr
	closed bool
}

var (
	nameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	ifRe   = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)
)

// New creates the namespace Prefix+name (name may already carry the
// prefix), brings up lo, and creates the bridge with bridgeCIDR as its
// address, up. Before that it removes every kiln-t-* namespace whose
// owner process is gone (a crashed earlier run), and fails if the name is
// taken by a live process. Callers should Close it when done (t.Cleanup).
func New(name, bridgeCIDR string) (*Net, error) {
	if !strings.HasPrefix(name, Prefix) {
		name = Prefix + name
	}
	if !nameRe.MatchString(name) || len(name) > 40 {
		return nil, fmt.Errorf("netns %q: want lower-case letters, digits and dashes, at most 40 characters", name)
	}
	addr, err := netip.ParsePrefix(bridgeCIDR)
	if err != nil {
		return nil, fmt.Errorf("netns %s: bridge address: %w", name, err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("netns %s: iproute2's ip: %w", name, err)
	}
	if _, err := RemoveStale(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(runDir, name)); err == nil {
		return nil, fmt.Errorf("netns %s: exists and its owner (%s) still runs", name, ownerOf(name))
	}
	if err := run("ip", "netns", "add", name); err != nil {
		return nil, fmt.Errorf("netns %s: creating: %w", name, err)
	}
	n := &Net{Name: name, BridgeAddr: addr}
	if err := writeOwner(name); err != nil {
		n.Close()
		return nil, fmt.Errorf("netns %s: recording the owner: %w", name, err)
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", Bridge, "type", "bridge"},
		{"addr", "add", addr.String(), "dev", Bridge},
		{"link", "set", Bridge, "up"},
	} {
		if err := n.ip(args...); err != nil {
			n.Close()
			return nil, fmt.Errorf("netns %s: bridge %s: %w", name, Bridge, err)
		}
	}
	return n, nil
}

// AddTap creates the tap device name inside the namespace (for QEMU's
// -netdev tap,ifname=name), enslaves it to the bridge and brings it up.
// Interface names are at most 15 characters.
func (n *Net) AddTap(name string) error {
	if len(name) > 15 || !ifRe.MatchString(name) {
		return fmt.Errorf("netns %s: tap %q: want at most 15 letters, digits, '_', '.', '-'", n.Name, name)
	}
	for _, args := range [][]string{
		{"tuntap", "add", "dev", name, "mode", "tap"},
		{"link", "set", name, "master", Bridge},
		{"link", "set", name, "up"},
	} {
		if err := n.ip(args...); err != nil {
			return fmt.Errorf("netns %s: tap %s: %w", n.Name, name, err)
		}
	}
	return nil
}

// AddHost makes DialContext resolve name to addrs (tried in order), e.g.
// a site's discovery name to its masters. DialContext never asks the
// host's resolver: its answers, and the DNS traffic, belong outside.
func (n *Net) AddHost(name string, addrs ...netip.Addr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.hosts == nil {
		n.hosts = map[string][]netip.Addr{}
	}
	n.hosts[strings.ToLower(strings.TrimSuffix(name, "."))] = append([]netip.Addr(nil), addrs...)
}

// Command runs a program inside the namespace (ip netns exec, which
// execs it: the command's PID is the program's).
func (n *Net) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// DialContext dials addr from inside the namespace: the socket is made
// there and stays there. Its host is an IP address or a name given to
// AddHost. It fits rest.Config.Dial and http.Transport.DialContext.
func (n *Net) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("netns %s: dial %s: %w", n.Name, addr, err)
	}
	ips, err := n.resolve(host)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, ip := range ips {
		var c net.Conn
		err := n.Do(func() error {
			var err error
			// IP literal: no lookup and no parallel dial goroutines; the
			// socket is created on this locked thread.
			c, err = (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
			return err
		})
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("netns %s: dial %s: %w", n.Name, addr, errors.Join(errs...))
}

// Listen listens on addr (an IP address and port) inside the namespace.
func (n *Net) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := n.Do(func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netns %s: listen %s: %w", n.Name, addr, err)
	}
	return l, nil
}

func (n *Net) resolve(host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if ips := n.hosts[strings.ToLower(strings.TrimSuffix(host, "."))]; len(ips) > 0 {
		return ips, nil
	}
	return nil, fmt.Errorf("netns %s: no address for %q: give it with AddHost (the host's resolver is not asked)", n.Name, host)
}

// Do runs f on a thread switched into the namespace, and switches back.
// Sockets f creates stay in the namespace. If the thread cannot be
// switched back it stays locked, so the runtime ends it with the
// goroutine instead of reusing a thread in the wrong namespace.
func (n *Net) Do(f func() error) error {
	target, err := os.Open(filepath.Join(runDir, n.Name))
	if err != nil {
		return fmt.Errorf("netns %s: %w", n.Name, err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	// A fresh goroutine: if restoring fails, it is this goroutine (and its
	// thread) that ends, not the caller's.
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns %s: the thread's own namespace: %w", n.Name, err)
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns %s: entering: %w", n.Name, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// Still locked: the thread exits with this goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("netns %s: switching the thread back: %w", n.Name, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Link describes one of the namespace's interfaces as `ip -d link show`
// prints it, for tests and failure messages.
func (n *Net) Link(name string) (string, error) {
	out, err := n.Command(context.Background(), "ip", "-d", "link", "show", "dev", name).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("netns %s: link %s: %w: %s", n.Name, name, err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// Close deletes the namespace, and with it the bridge and the taps. It
// may be called again. Processes still inside keep the namespace alive
// (and are reported) until they end.
func (n *Net) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	pids := pidsIn(n.Name)
	err := run("ip", "netns", "del", n.Name)
	if err != nil && !Exists(n.Name) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("netns %s: deleting: %w", n.Name, err)
	}
	n.closed = true
	os.Remove(filepath.Join(ownerDir, n.Name))
	if len(pids) > 0 {
		return fmt.Errorf("netns %s: deleted, but processes %v still run inside it", n.Name, pids)
	}
	return nil
}

// Exists reports whether `ip netns` knows the namespace name.
func Exists(name string) bool {
	_, err := os.Stat(filepath.Join(runDir, name))
	return err == nil
}

// List returns the kiln-t-* namespaces that exist.
func List() ([]string, error) {
	entries, err := os.ReadDir(runDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", runDir, err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), Prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// RemoveStale deletes the kiln-t-* namespaces whose owner process is gone
// (or unrecorded), killing what a crashed run left running inside them
// (its QEMUs), and returns their names. Namespaces of live test processes
// are left alone.
func RemoveStale() ([]string, error) {
	names, err := List()
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, name := range names {
		if ownerAlive(name) {
			continue
		}
		for _, pid := range pidsIn(name) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if err := run("ip", "netns", "del", name); err != nil && Exists(name) {
			return removed, fmt.Errorf("netns %s: removing the stale namespace: %w", name, err)
		}
		os.Remove(filepath.Join(ownerDir, name))
		removed = append(removed, name)
	}
	return removed, nil
}

// The owner record: "pid starttime", the start time from /proc/pid/stat
// so that a reused pid does not pass for the owner.
func writeOwner(name string) error {
	if err := os.MkdirAll(ownerDir, 0o755); err != nil {
		return err
	}
	pid := os.Getpid()
	return os.WriteFile(filepath.Join(ownerDir, name), []byte(fmt.Sprintf("%d %s\n", pid, startTime(pid))), 0o644)
}

func ownerOf(name string) string {
	data, err := os.ReadFile(filepath.Join(ownerDir, name))
	if err != nil {
		return "unrecorded"
	}
	pid, _, _ := strings.Cut(strings.TrimSpace(string(data)), " ")
	return "pid " + pid
}

func ownerAlive(name string) bool {
	data, err := os.ReadFile(filepath.Join(ownerDir, name))
	if err != nil {
		return false
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		return false
	}
	st := startTime(pid)
	return st != "" && st == f[1]
}

func startTime(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command may hold spaces and parentheses: fields count from the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19] // field 22, starttime
}

// pidsIn lists the processes inside the namespace (ip netns pids).
func pidsIn(name string) []int {
	out, err := exec.Command("ip", "netns", "pids", name).Output()
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

// DropTCP drops every TCP packet the bridge forwards to addr:port (a
// port that times out, as behind a busy peer or a switch port still in
// spanning-tree listening state) until the returned func lifts the rule.
// It needs iptables and the kernel's bridge netfilter: the namespace's
// bridged traffic is passed through its own FORWARD chain.
func (n *Net) DropTCP(addr netip.Addr, port int) (lift func() error, err error) {
	if err := n.sysctl("net.bridge.bridge-nf-call-iptables", "1"); err != nil {
		return nil, fmt.Errorf("netns %s: bridged traffic through iptables: %w", n.Name, err)
	}
	rule := []string{"FORWARD", "-d", addr.String(), "-p", "tcp", "--dport", strconv.Itoa(port), "-j", "DROP"}
	if err := run("ip", append([]string{"netns", "exec", n.Name, "iptables", "-I"}, rule...)...); err != nil {
		return nil, fmt.Errorf("netns %s: dropping tcp to %s:%d: %w", n.Name, addr, port, err)
	}
	return func() error {
		return run("ip", append([]string{"netns", "exec", n.Name, "iptables", "-D"}, rule...)...)
	}, nil
}

func (n *Net) sysctl(key, value string) error {
	return run("ip", "netns", "exec", n.Name, "sysctl", "-q", "-w", key+"="+value)
}

func (n *Net) ip(args ...string) error {
	return run("ip", append([]string{"-n", n.Name}, args...)...)
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
