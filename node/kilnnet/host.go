package kilnnet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// RouteProto is the route protocol that marks kiln-net's routes (0x4b,
// "K"; unassigned in the kernel's rtnetlink.h and iproute2's rt_protos): it
// lists and removes only routes of this protocol, never an operator's.
const RouteProto = 0x4b

// The chains kiln-net owns, and what jumps to them.
const (
	ForwardChain     = "KILN-FORWARD"     // filter: accept the cluster pod CIDR, first in FORWARD
	PostroutingChain = "KILN-POSTROUTING" // nat: masquerade pod traffic leaving the cluster pod CIDR
)

// cmdTimeout bounds every command kiln-net runs.
const cmdTimeout = 20 * time.Second

// run runs a command bounded by cmdTimeout and returns its standard output;
// the error names the command and carries its standard error.
func run(ctx context.Context, stdin string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = time.Second
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", err, ctx.Err())
		}
		if msg := strings.TrimSpace(errOut.String()); msg != "" {
			return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
		}
		return "", fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return out.String(), nil
}

// IPRoutes is the host's main routing table through iproute2's ip, for one
// address family (the cluster pod CIDR's).
type IPRoutes struct {
	IPv6 bool
}

func (r IPRoutes) family() string {
	if r.IPv6 {
		return "-6"
	}
	return "-4"
}

var protoArg = strconv.Itoa(RouteProto)

// List returns the main table's routes of kiln-net's protocol.
func (r IPRoutes) List(ctx context.Context) ([]Route, error) {
	out, err := run(ctx, "", "ip", r.family(), "-j", "route", "show", "table", "main", "proto", protoArg)
	if err != nil {
		return nil, fmt.Errorf("listing kiln-net's routes (proto %#x): %w", RouteProto, err)
	}
	var rows []struct {
		Dst     string `json:"dst"`
		Gateway string `json:"gateway"`
	}
	if strings.TrimSpace(out) != "" {
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			return nil, fmt.Errorf("listing kiln-net's routes (proto %#x): reading ip's output: %w", RouteProto, err)
		}
	}
	var routes []Route
	for _, row := range rows {
		dst, err := parseDst(row.Dst)
		via, verr := netip.ParseAddr(row.Gateway)
		if err != nil || verr != nil {
			continue // not a route kiln-net makes (multipath, default): left alone, and never removed
		}
		routes = append(routes, Route{Dst: dst, Via: via})
	}
	return routes, nil
}

// parseDst reads ip's destination: a host route has no prefix length.
func parseDst(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		return netip.ParsePrefix(s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// Add adds the route with kiln-net's protocol; it fails ("File exists")
// when another route has the destination, which it leaves alone.
func (r IPRoutes) Add(ctx context.Context, rt Route) error {
	_, err := run(ctx, "", "ip", r.family(), "route", "add", rt.Dst.String(), "via", rt.Via.String(), "proto", protoArg)
	return err
}

// Replace changes kiln-net's route to the destination.
func (r IPRoutes) Replace(ctx context.Context, rt Route) error {
	_, err := run(ctx, "", "ip", r.family(), "route", "replace", rt.Dst.String(), "via", rt.Via.String(), "proto", protoArg)
	return err
}

// Delete removes the route only if it has kiln-net's protocol (the kernel
// matches the protocol given).
func (r IPRoutes) Delete(ctx context.Context, rt Route) error {
	_, err := run(ctx, "", "ip", r.family(), "route", "del", rt.Dst.String(), "via", rt.Via.String(), "proto", protoArg)
	return err
}

// Iptables keeps kiln-net's chains with the iptables binaries of the
// image: the nft-backed ones, as the node's (Debian 12's default), so both
// see the same rules. Each chain is rewritten with iptables-restore
// --noflush (atomically, touching no other chain) only when it differs.
type Iptables struct{}

type chainSpec struct {
	table, parent, chain string
	rules                []string // as iptables -S prints them, without "-A chain"
	first                bool     // the jump must be the parent's first rule
	what                 string   // for the log
}

func chains(cidr netip.Prefix) []chainSpec {
	c := cidr.String()
	return []chainSpec{
		{table: "filter", parent: "FORWARD", chain: ForwardChain, first: true,
			rules: []string{"-s " + c + " -j ACCEPT", "-d " + c + " -j ACCEPT"},
			what:  "forwarding from and to " + c + " accepted"},
		{table: "nat", parent: "POSTROUTING", chain: PostroutingChain,
			rules: []string{"-s " + c + " ! -d " + c + " -j MASQUERADE"},
			what:  "traffic from " + c + " leaving " + c + " masqueraded"},
	}
}

// Ensure keeps KILN-FORWARD (jumped to from the first rule of FORWARD) and
// KILN-POSTROUTING (jumped to once from nat POSTROUTING).
func (Iptables) Ensure(ctx context.Context, clusterCIDR netip.Prefix) ([]string, error) {
	bin := "iptables"
	if clusterCIDR.Addr().Is6() {
		bin = "ip6tables"
	}
	var changed []string
	for _, c := range chains(clusterCIDR.Masked()) {
		did, err := ensureChain(ctx, bin, c)
		changed = append(changed, did...)
		if err != nil {
			return changed, fmt.Errorf("chain %s (%s table): %w", c.chain, c.table, err)
		}
	}
	return changed, nil
}

func ensureChain(ctx context.Context, bin string, c chainSpec) ([]string, error) {
	var script []string
	var changed []string
	out, err := run(ctx, "", bin, "-w", "5", "-t", c.table, "-S", c.chain)
	var have []string
	for _, l := range strings.Split(out, "\n") {
		if r, ok := strings.CutPrefix(l, "-A "+c.chain+" "); ok {
			have = append(have, r)
		}
	}
	if err != nil || !slices.Equal(have, c.rules) {
		script = append(script, ":"+c.chain+" - [0:0]") // creates the chain, or flushes it (--noflush)
		for _, r := range c.rules {
			script = append(script, "-A "+c.chain+" "+r)
		}
		if err != nil {
			changed = append(changed, fmt.Sprintf("chain %s (%s) created: %s", c.chain, c.table, c.what))
		} else {
			changed = append(changed, fmt.Sprintf("chain %s (%s) rewritten: %s (it held %q)", c.chain, c.table, c.what, have))
		}
	}

	out, err = run(ctx, "", bin, "-w", "5", "-t", c.table, "-S", c.parent)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", c.parent, err)
	}
	var jumps []int // positions (from 1) of the jumps to the chain
	pos := 0
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "-A "+c.parent+" ") {
			continue
		}
		pos++
		if l == "-A "+c.parent+" -j "+c.chain {
			jumps = append(jumps, pos)
		}
	}
	ok := len(jumps) == 1 && (!c.first || jumps[0] == 1)
	if !ok {
		for range jumps {
			script = append(script, "-D "+c.parent+" -j "+c.chain)
		}
		script = append(script, "-I "+c.parent+" 1 -j "+c.chain)
		switch {
		case len(jumps) == 0:
			changed = append(changed, fmt.Sprintf("jump to %s inserted first in %s (%s)", c.chain, c.parent, c.table))
		case len(jumps) == 1:
			changed = append(changed, fmt.Sprintf("jump to %s moved back to the top of %s (%s): it had become rule %d", c.chain, c.parent, c.table, jumps[0]))
		default:
			changed = append(changed, fmt.Sprintf("jump to %s was %d times in %s (%s): once now, first", c.chain, len(jumps), c.parent, c.table))
		}
	}
	if len(script) == 0 {
		return nil, nil
	}
	in := "*" + c.table + "\n" + strings.Join(script, "\n") + "\nCOMMIT\n"
	if _, err := run(ctx, in, bin+"-restore", "-w", "5", "--noflush"); err != nil {
		return nil, err
	}
	return changed, nil
}
