package freeport

import (
	"net"
	"strconv"
	"testing"
)

// A port Get returns is outside the kernel's ephemeral range and can be
// listened on.
func TestGet(t *testing.T) {
	lo, ok := ephemeralStart()
	for range 20 {
		port, err := Get()
		if err != nil {
			t.Fatal(err)
		}
		if ok && port >= lo {
			t.Errorf("port %d is in the ephemeral range (from %d)", port, lo)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("listening on port %d: %v", port, err)
		}
		l.Close()
	}
}

// Ports a test picks before it binds any are all different: two servers
// given the same port would race for it.
func TestGetNeverRepeatsAPort(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		port, err := Get()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
}
