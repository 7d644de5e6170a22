package manifests

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kiln-project/kiln/contract/discovery"
)

// Corefile is the node-local CoreDNS configuration: the discovery name
// from the zone file (reloaded when the anchor rewrites it), everything
// else forwarded to the site's resolvers. It listens only on the
// node-local address, so pods never see it.
func Corefile(p Params) string {
	c := p.Node.Cluster
	var b strings.Builder
	fmt.Fprintf(&b, "%s:53 {\n    bind %s\n    file %s %s {\n        reload 2s\n    }\n    errors\n}\n",
		c.DiscoveryName, discovery.NodeLocalAddress, ZoneFile, c.DiscoveryName)
	if len(c.UpstreamDNS) > 0 {
		fmt.Fprintf(&b, ".:53 {\n    bind %s\n    forward . %s\n    cache 30\n    errors\n}\n",
			discovery.NodeLocalAddress, strings.Join(c.UpstreamDNS, " "))
	}
	return b.String()
}

// NodeLocalDNS is the static pod of the node-local CoreDNS, on every node.
func NodeLocalDNS(p Params) *corev1.Pod {
	pod := staticPod("kiln-node-dns", p.Images.CoreDNS, []string{"/coredns", "-conf", CorefilePath}, nil)
	pod.Labels["tier"] = "node"
	// NET_BIND_SERVICE: it listens on port 53. kiln's CoreDNS image runs
	// it as root; an image that runs it as another user gives the binary
	// the capability as a file capability, which also takes effect only
	// when the container keeps it.
	pod.Spec.Containers[0].SecurityContext = confined("NET_BIND_SERVICE")
	// The Corefile and the zone the anchor keeps, read-only.
	mount(pod, "dns", DNSDir, true, corev1.HostPathDirectory)
	return pod
}

// PodResolvConfContent is the resolv.conf the kubelet gives pods with
// dnsPolicy Default: the site's resolvers, never the node-local one.
func PodResolvConfContent(p Params) string {
	var b strings.Builder
	b.WriteString("# pods with dnsPolicy: Default; written by kiln\n")
	for _, s := range p.Node.Cluster.UpstreamDNS {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	return b.String()
}
