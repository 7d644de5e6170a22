package role

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/nodelabels"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"
)

// kubeletEnv is, from the node file, the kubelet's per-node arguments: its address (ip) and name,
// the site's labels a kubelet may set on itself, and the site's taints,
// registered with the Node so no pod lands before them, and the flags
// of the site's timing profile.
func kubeletEnv(f *nodefile.NodeFile, ip string) string {
	args := []string{"--node-ip=" + ip, "--hostname-override=" + f.Name}
	labels := []string{manifests.RoleLabel + "=" + f.Role}
	for _, k := range slices.Sorted(maps.Keys(f.Labels)) {
		if nodelabels.KubeletMaySet(k) {
			labels = append(labels, k+"="+f.Labels[k])
		}
	}
	args = append(args, "--node-labels="+strings.Join(labels, ","))
	if len(f.Taints) > 0 {
		var taints []string
		for _, t := range f.Taints {
			taints = append(taints, fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect))
		}
		args = append(args, "--register-with-taints="+strings.Join(taints, ","))
	}
	args = append(args, manifests.TimingFor(f.Cluster.Timing).KubeletFlags()...)
	return "KUBELET_ARGS=" + strings.Join(args, " ") + "\n"
}

// restrictedLabels are the node file's labels a kubelet may not set.
func restrictedLabels(f *nodefile.NodeFile) map[string]string {
	out := map[string]string{}
	for k, v := range f.Labels {
		if !nodelabels.KubeletMaySet(k) {
			out[k] = v
		}
	}
	return out
}

// kubeletIP is the address the kubelet registers: the site's for a
// static node; for a DHCP node, the one this machine reaches the first
// master from, waited for within bound while no route leads there yet.
// The kubelet's own guess needs a default route or a hostname that
// resolves, which a segment may not give, and on a machine with several
// interfaces it takes the default route's, not the one the cluster uses.
func kubeletIP(ctx context.Context, f *nodefile.NodeFile, source func(dst netip.Addr) (netip.Addr, error), bound time.Duration) (string, error) {
	if f.Address != "" {
		return f.Address, nil
	}
	if len(f.Masters) == 0 {
		return "", errors.New("a DHCP node's kubelet address: the node file lists no master to reach")
	}
	m := f.Masters[0]
	dst, err := netip.ParseAddr(m.Address)
	if err != nil {
		return "", fmt.Errorf("master %s's address %q: %w", m.Name, m.Address, err)
	}
	var ip netip.Addr
	err = retry.WaitEvery(ctx, fmt.Sprintf("a route to master %s (%s), whose source address the kubelet registers", m.Name, dst), bound, 2*time.Second, nil,
		func(context.Context) error {
			ip, err = source(dst)
			return err
		})
	if err != nil {
		return "", err
	}
	return ip.String(), nil
}

// routeSource is the local address the kernel picks to reach dst: a UDP
// socket's connect sends nothing, it only chooses the route.
func routeSource(dst netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 6443)))
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}
