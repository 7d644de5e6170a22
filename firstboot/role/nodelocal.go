package role

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kiln-project/kiln/contract/discovery"
	"github.com/kiln-project/kiln/internal/command"
)

// nodeLocal owns the node-local DNS address on its dummy link, through
// the host's ip(8).
type nodeLocal struct {
	sys command.Runner
	log func(format string, args ...any)
}

// ensure makes sure the node-local DNS address is on its
// dummy link: the host's resolv.conf and the kubelet find the apiservers
// through it. systemd-networkd makes the link from the image's files;
// after a whole-cluster power cut a QEMU master came up without the
// address (its kubelet never resolved the discovery name, and its Node
// stayed NotReady while both apiservers were ready). A missing link or
// address is added with ip(8), and the console says so; networkd's own
// files match the link, so it keeps what is added.
func (l nodeLocal) ensure(ctx context.Context) error {
	link, addr := discovery.NodeLocalLink, discovery.NodeLocalAddress+"/32"
	out, err := l.sys.Run(ctx, "ip", "-4", "-o", "addr", "show", "dev", link)
	if err == nil && hasAddress(string(out), addr) {
		return nil
	}
	if err != nil { // no such link
		if _, err := l.sys.Run(ctx, "ip", "link", "add", link, "type", "dummy"); err != nil {
			return fmt.Errorf("the node-local DNS link %s is missing and could not be added: %w", link, err)
		}
	}
	for _, args := range [][]string{{"link", "set", link, "up"}, {"addr", "replace", addr, "dev", link}} {
		if _, err := l.sys.Run(ctx, "ip", args...); err != nil {
			return fmt.Errorf("putting the node-local DNS address %s on %s: %w", addr, link, err)
		}
	}
	l.log("the node-local DNS address %s was not on %s (systemd-networkd had not put it there): added it", addr, link)
	return nil
}

// hasAddress reports whether `ip -4 -o addr show` output lists addr.
func hasAddress(out, addr string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "inet" && f[i+1] == addr {
				return true
			}
		}
	}
	return false
}

// nodeLocalCheckEvery is how often a node waiting for its own Ready looks
// at the node-local DNS address again.
const nodeLocalCheckEvery = 30 * time.Second

// keep returns a check to call while waiting for the
// cluster: at most every nodeLocalCheckEvery it makes sure the address is
// still there. A failure is said, not returned: the wait goes on.
func (l nodeLocal) keep() func(ctx context.Context) {
	var last time.Time
	return func(ctx context.Context) {
		if time.Since(last) < nodeLocalCheckEvery {
			return
		}
		last = time.Now()
		if err := l.ensure(ctx); err != nil {
			l.log("%v", err)
		}
	}
}
