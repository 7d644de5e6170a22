package kilnnet

import (
	"fmt"
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// DesiredRoutes are the routes node self keeps: for every other Node, one
// per pod CIDR of the cluster's family inside clusterCIDR, via the Node's
// first InternalIP of that family. The notes say why a Node gets no route
// (no pod CIDR or no address yet, a CIDR outside the cluster's, a CIDR
// claimed twice: the first Node by name keeps it).
func DesiredRoutes(nodes []corev1.Node, self string, clusterCIDR netip.Prefix) (routes []Route, notes []string) {
	clusterCIDR = clusterCIDR.Masked()
	sorted := append([]corev1.Node(nil), nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	owner := map[netip.Prefix]string{}
	for _, n := range sorted {
		if n.Name == self {
			continue
		}
		cidrs := n.Spec.PodCIDRs
		if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
			cidrs = []string{n.Spec.PodCIDR}
		}
		if len(cidrs) == 0 {
			notes = append(notes, fmt.Sprintf("node %s has no pod CIDR yet: no route to its pods", n.Name))
			continue
		}
		for _, c := range cidrs {
			dst, err := netip.ParsePrefix(c)
			if err != nil {
				notes = append(notes, fmt.Sprintf("node %s: pod CIDR %q is not a network: no route", n.Name, c))
				continue
			}
			dst = dst.Masked()
			if dst.Addr().Is4() != clusterCIDR.Addr().Is4() {
				continue // the other family of a dual-stack node: not this cluster CIDR's
			}
			if dst.Bits() < clusterCIDR.Bits() || !clusterCIDR.Contains(dst.Addr()) {
				notes = append(notes, fmt.Sprintf("node %s: pod CIDR %s is outside the cluster pod CIDR %s: no route", n.Name, dst, clusterCIDR))
				continue
			}
			via, ok := internalIP(n, dst.Addr().Is4())
			if !ok {
				notes = append(notes, fmt.Sprintf("node %s has no InternalIP address for its pod CIDR %s yet: no route", n.Name, dst))
				continue
			}
			if prev, dup := owner[dst]; dup {
				notes = append(notes, fmt.Sprintf("node %s: pod CIDR %s is also node %s's: it goes via %s", n.Name, dst, prev, prev))
				continue
			}
			owner[dst] = n.Name
			routes = append(routes, Route{Dst: dst, Via: via, Node: n.Name})
		}
	}
	return routes, notes
}

func internalIP(n corev1.Node, v4 bool) (netip.Addr, bool) {
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err == nil && ip.Unmap().Is4() == v4 {
			return ip.Unmap(), true
		}
	}
	return netip.Addr{}, false
}
