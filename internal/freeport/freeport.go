// Package freeport picks TCP ports on 127.0.0.1 for the servers tests
// start (etcd, an apiserver, a QEMU hostfwd). A port the kernel hands out
// for 127.0.0.1:0 lies in its ephemeral range, which is also where every
// outgoing connection's local port comes from: between the pick and the
// server's bind, a client's connect can take it ("bind: address already
// in use", seen with three etcds on one host). These ports come from
// below that range, where only a listener asks for a port by number.
// A test picks all its ports before it starts any server, so a port is
// handed out at most once per process.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// given are the ports handed out in this process: free when picked, but
// not yet bound by the server they were picked for.
var given = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Below the usual ephemeral range (net.ipv4.ip_local_port_range is
// 32768-60999 by default): the pick is checked against the host's own.
const (
	low  = 20000
	high = 32768
)

// Get returns a port on 127.0.0.1 that nothing listens on now and that
// no outgoing connection will be given.
func Get() (int, error) {
	lo, hi := low, high
	if elo, ok := ephemeralStart(); ok && elo < hi {
		hi = elo
	}
	for range 100 {
		port := lo + rand.IntN(hi-lo)
		if !take(port) {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free TCP port on 127.0.0.1 in %d-%d after 100 tries", lo, hi-1)
}

// ephemeralStart is the first port of the kernel's range for outgoing
// connections.
func ephemeralStart() (int, bool) {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return 0, false
	}
	lo, err := strconv.Atoi(f[0])
	return lo, err == nil && lo > low
}

// take marks port handed out; false when it already was.
func take(port int) bool {
	given.Lock()
	defer given.Unlock()
	if given.ports[port] {
		return false
	}
	given.ports[port] = true
	return true
}
