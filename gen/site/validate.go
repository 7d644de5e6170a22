package site

import (
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"net"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/kiln-project/kiln/contract/discovery"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/smbios"
	"github.com/kiln-project/kiln/internal/validation"
	"golang.org/x/crypto/ssh"
	k8svalidation "k8s.io/apimachinery/pkg/util/validation"
)

// SupportedKubernetes lists the minor releases kiln's manifests are
// written for.
var SupportedKubernetes = []string{"v1.36", "v1.37"}

var kubeVersion = regexp.MustCompile(`^(v1\.\d+)\.\d+$`)

var taintEffects = []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}

// nodePorts are the fixed TCP ports kiln's components listen on, on
// every node or every master (some on loopback only, which the
// apiserver, listening on every address, collides with all the same).
var nodePorts = map[int]string{
	22:    "sshd",
	53:    "the node-local CoreDNS",
	2379:  "etcd (clients)",
	2380:  "etcd (peers)",
	2381:  "etcd (metrics and health)",
	10248: "the kubelet (health)",
	10249: "kube-proxy (metrics)",
	10250: "the kubelet",
	10256: "kube-proxy (health)",
	10257: "kube-controller-manager",
	10259: "kube-scheduler",
}

// network is a named address range the site uses, for overlap checks.
type network struct {
	path   string
	what   string
	prefix netip.Prefix
}

func (s *Site) validate(l *validation.List) {
	if s.APIVersion != APIVersion {
		l.Addf("apiVersion", "must be %q, got %q", APIVersion, s.APIVersion)
	}
	if s.Kind != Kind {
		l.Addf("kind", "must be %q, got %q", Kind, s.Kind)
	}
	nets := s.validateCluster(l)
	nets = append(nets, s.validateNodes(l)...)
	checkOverlaps(nets, l)
	checkFamilies(nets, l)
}

func (s *Site) validateCluster(l *validation.List) []network {
	c := s.Cluster
	p := validation.Path("cluster")
	dnsLabel(l, p.Field("name"), c.Name)
	if m := kubeVersion.FindStringSubmatch(c.KubernetesVersion); m == nil {
		l.Addf(p.Field("kubernetesVersion").String(), "must look like v1.37.1, got %q", c.KubernetesVersion)
	} else if !contains(SupportedKubernetes, m[1]) {
		l.Addf(p.Field("kubernetesVersion").String(), "%s is not supported; kiln supports %s", c.KubernetesVersion, strings.Join(SupportedKubernetes, ", "))
	}
	if errs := k8svalidation.IsDNS1123Subdomain(c.Domain); len(errs) > 0 {
		l.Addf(p.Field("domain").String(), "not a DNS name: %s", errs[0])
	}
	s.validateDiscoveryName(l, p.Field("discoveryName"))
	if c.APIServerPort < 1 || c.APIServerPort > 65535 {
		l.Addf(p.Field("apiServerPort").String(), "must be a port number (1-65535), got %d", c.APIServerPort)
	} else if who, taken := nodePorts[c.APIServerPort]; taken {
		l.Addf(p.Field("apiServerPort").String(), "port %d is taken on the nodes by %s", c.APIServerPort, who)
	}
	var nets []network
	if pre, ok := cidr(l, p.Field("podCIDR"), c.PodCIDR); ok {
		checkPodCIDR(l, p.Field("podCIDR"), pre, len(s.Nodes))
		nets = append(nets, network{p.Field("podCIDR").String(), "the pod network", pre})
	}
	if pre, ok := cidr(l, p.Field("serviceCIDR"), c.ServiceCIDR); ok {
		checkServiceCIDR(l, p.Field("serviceCIDR"), pre)
		nets = append(nets, network{p.Field("serviceCIDR").String(), "the service network", pre})
	}
	for i, a := range c.UpstreamDNS {
		ip, err := netip.ParseAddr(a)
		switch {
		case err != nil:
			l.Addf(p.Field("upstreamDNS").Index(i).String(), "not an IP address: %q", a)
		case ip == nodeLocalDNS:
			l.Addf(p.Field("upstreamDNS").Index(i).String(), "%s is the node-local CoreDNS, which forwards to upstreamDNS: a loop", ip)
		}
	}
	for i, n := range c.NTPServers {
		if _, err := netip.ParseAddr(n); err != nil && len(k8svalidation.IsDNS1123Subdomain(n)) > 0 {
			l.Addf(p.Field("ntpServers").Index(i).String(), "not a host name or IP address: %q", n)
		}
	}
	for i, k := range c.SSHAuthorizedKeys {
		if err := checkSSHKey(k); err != nil {
			l.Addf(p.Field("sshAuthorizedKeys").Index(i).String(), "%v", err)
		}
	}
	s.validateLifetimes(l, p.Field("certificates"))
	s.validateRegistries(l, p.Field("registries"))
	s.validateRestoreFrom(l, p.Field("restoreFrom"))
	if !contains(Timings, c.Timing) {
		l.Addf(p.Field("timing").String(), "unknown timing profile %q: must be %s (see docs/timing.md)", c.Timing, strings.Join(Timings, " or "))
	}
	c.EtcdSnapshots.validate(l, p.Field("etcdSnapshots"))
	return nets
}

// checkServiceCIDR requires room for the two service addresses kiln
// hands out itself: the apiserver's (ServiceIP(1)) and cluster DNS's
// (ServiceIP(10)).
func checkServiceCIDR(l *validation.List, p validation.Path, pre netip.Prefix) {
	apiserver, dns := nthAddr(pre, 1), nthAddr(pre, 10)
	if !pre.Contains(dns) {
		l.Addf(p.String(), "%s is too small: it must hold the apiserver's service address (its first, %s) and cluster DNS (its tenth, %s); a /%d at the least",
			pre, apiserver, dns, pre.Addr().BitLen()-4)
	}
}

// checkPodCIDR requires a node's block of pod addresses for every node.
func checkPodCIDR(l *validation.List, p validation.Path, pre netip.Prefix, nodes int) {
	block := nodefile.NodePodBits(pre.Addr())
	need := bits.Len(uint(max(nodes, 1) - 1)) // bits to number the blocks
	switch {
	case pre.Bits() > block:
		l.Addf(p.String(), "%s is smaller than the /%d block of pod addresses the controller-manager gives each node", pre, block)
	case block-pre.Bits() < need:
		l.Addf(p.String(), "%s holds %d blocks of /%d, one per node, for %d nodes", pre, 1<<(block-pre.Bits()), block, nodes)
	}
}

// The discovery name is answered by the node-local CoreDNS from its own
// zone; inside the cluster domain, cluster DNS would shadow it.
func (s *Site) validateDiscoveryName(l *validation.List, p validation.Path) {
	name, domain := s.Cluster.DiscoveryName, s.Cluster.Domain
	switch {
	case len(k8svalidation.IsDNS1123Subdomain(name)) > 0:
		l.Addf(p.String(), "not a DNS name: %q", name)
	case !strings.Contains(name, "."):
		l.Addf(p.String(), "%q must have at least two labels (e.g. %s): a single label is searched in every search domain", name, DefaultDiscoveryName)
	case name == domain || strings.HasSuffix(name, "."+domain) || strings.HasSuffix(domain, "."+name):
		l.Addf(p.String(), "%q collides with the cluster domain %q: pick a name outside it (e.g. %s)", name, domain, DefaultDiscoveryName)
	}
}

func (s *Site) validateLifetimes(l *validation.List, p validation.Path) {
	c := s.Cluster.Certificates
	ca, okCA := lifetime(l, p.Field("caValidity"), c.CAValidity, "87600h or 3650d")
	leaf, okLeaf := lifetime(l, p.Field("leafValidity"), c.LeafValidity, "8760h or 365d")
	if okCA && okLeaf && leaf > ca {
		l.Addf(p.Field("leafValidity").String(), "%s outlives the CAs (%s)", c.LeafValidity, c.CAValidity)
	}
}

func lifetime(l *validation.List, p validation.Path, v, examples string) (time.Duration, bool) {
	d, err := ParseDuration(v)
	switch {
	case errors.Is(err, errTooLong):
		l.Addf(p.String(), "%v", err)
	case err != nil || d <= 0:
		l.Addf(p.String(), "must be a positive duration such as %s, got %q", examples, v)
	default:
		return d, true
	}
	return 0, false
}

func (s *Site) validateNodes(l *validation.List) []network {
	if len(s.Nodes) == 0 {
		l.Addf("nodes", "a site needs at least one node, the genesis node")
		return nil
	}
	names, ips, macs, uuids := map[string]string{}, map[netip.Addr]string{}, map[string]string{}, map[string]string{}
	var genesis []int
	var nets []network
	for i, n := range s.Nodes {
		p := validation.Path("nodes").Index(i)
		if dnsLabel(l, p.Field("name"), n.Name) {
			if prev, dup := names[n.Name]; dup {
				l.Addf(p.Field("name").String(), "duplicate node name %q (also %s)", n.Name, prev)
			}
			names[n.Name] = p.String()
		}
		switch n.Role {
		case RoleGenesis:
			genesis = append(genesis, i)
		case RoleMaster, RoleWorker:
		default:
			l.Addf(p.Field("role").String(), "unknown role %q: must be %s, %s or %s", n.Role, RoleGenesis, RoleMaster, RoleWorker)
		}
		if len(n.MACs) == 0 {
			l.Addf(p.Field("macs").String(), "at least one MAC address is required: the network config matches the node's NIC by it")
		}
		validateMACs(l, p.Field("macs"), n.MACs, macs)
		if n.UUID != "" {
			s.Nodes[i].UUID = validateUUID(l, p.Field("uuid"), n.UUID, uuids)
		}
		if pre, ok := validateNetwork(l, p.Field("network"), n); ok {
			if prev, dup := ips[pre.Addr()]; dup {
				l.Addf(p.Field("network").Field("address").String(), "duplicate IP address %s (also %s)", pre.Addr(), prev)
			}
			ips[pre.Addr()] = p.Field("network").Field("address").String()
			nets = append(nets, network{p.Field("network").Field("address").String(), "the network of node " + n.Name, pre.Masked()})
		}
		validateInstallDisk(l, p.Field("installDisk"), n)
		validateLabels(l, p.Field("labels"), n.Labels)
		if n.Role == RoleWorker {
			refuseWorkerLabels(l, p.Field("labels"), n.Labels)
		}
		for j, t := range n.Taints {
			tp := p.Field("taints").Index(j)
			for _, e := range k8svalidation.IsQualifiedName(t.Key) {
				l.Addf(tp.Field("key").String(), "%q: %s", t.Key, e)
			}
			for _, e := range k8svalidation.IsValidLabelValue(t.Value) {
				l.Addf(tp.Field("value").String(), "%q: %s", t.Value, e)
			}
			if !contains(taintEffects, t.Effect) {
				l.Addf(tp.Field("effect").String(), "unknown effect %q: must be one of %s", t.Effect, strings.Join(taintEffects, ", "))
			}
		}
	}
	switch len(genesis) {
	case 0:
		l.Addf("nodes", "no node has role %s: exactly one must bootstrap the cluster", RoleGenesis)
	case 1:
	default:
		for _, i := range genesis[1:] {
			l.Addf(validation.Path("nodes").Index(i).Field("role").String(), "a second %s node (the first is nodes[%d]): exactly one node bootstraps the cluster", RoleGenesis, genesis[0])
		}
	}
	return nets
}

// validateInstallDisk requires a disk of every control-plane node: booted
// without one, its state would live in RAM, and a genesis node would
// bootstrap a fresh cluster on every boot.
func validateInstallDisk(l *validation.List, p validation.Path, n Node) {
	switch {
	case n.InstallDisk == "" && n.Role == RoleGenesis:
		l.Addf(p.String(), "required for the genesis node (name the boot disk if it boots from one): booted diskless, its state would live in RAM and every boot would bootstrap a fresh cluster")
	case n.InstallDisk == "" && n.Role == RoleMaster:
		l.Addf(p.String(), "required for a master (name the boot disk if it boots from one): booted diskless, its etcd member would live in RAM and be lost on every reboot")
	case n.InstallDisk != "" && !isDevicePath(n.InstallDisk):
		l.Addf(p.String(), "must be a plain device path under /dev/ (letters, digits and ._/:+-, no .. or //), such as /dev/sda or /dev/disk/by-id/..., got %q", n.InstallDisk)
	}
}

var devicePath = regexp.MustCompile(`^/dev/[A-Za-z0-9._/:+-]+$`)

// isDevicePath accepts the paths a disk has under /dev/ and nothing a
// shell or a path lookup would read more into.
func isDevicePath(v string) bool {
	return devicePath.MatchString(v) && path.Clean(v) == v && !strings.Contains(v, "..")
}

// validateMACs checks a node's MAC addresses; seen maps those of the
// nodes before it to their paths.
func validateMACs(l *validation.List, p validation.Path, macs []string, seen map[string]string) {
	for j, m := range macs {
		mp := p.Index(j)
		hw, err := net.ParseMAC(m)
		switch {
		case err != nil || len(hw) != 6:
			l.Addf(mp.String(), "not an Ethernet MAC address: %q", m)
			continue
		case hw[0]&1 == 1:
			l.Addf(mp.String(), "%s is a multicast address (the first octet is odd); a NIC's own address is unicast", hw)
		}
		if prev, dup := seen[hw.String()]; dup {
			l.Addf(mp.String(), "duplicate MAC address %s (also %s)", hw, prev)
		}
		seen[hw.String()] = mp.String()
	}
}

// validateUUID checks a node's SMBIOS UUID and returns it in lower case;
// seen maps those of the nodes before it to their paths.
func validateUUID(l *validation.List, p validation.Path, v string, seen map[string]string) string {
	u, ok := smbios.ParseUUID(v)
	switch {
	case !ok:
		l.Addf(p.String(), "not a UUID (8-4-4-4-12 hex digits, as the machine's /sys/class/dmi/id/product_uuid or dmidecode -s system-uuid shows it): %q", v)
		return v
	case smbios.Placeholder(u):
		l.Addf(p.String(), "%s is a placeholder firmware reports when a machine has no UUID of its own: it names no one machine; leave uuid out", u)
		return u
	}
	if prev, dup := seen[u]; dup {
		l.Addf(p.String(), "duplicate UUID %s (also %s)", u, prev)
	}
	seen[u] = p.String()
	return u
}

// validateNetwork checks a node's network and returns its static address.
func validateNetwork(l *validation.List, p validation.Path, n Node) (netip.Prefix, bool) {
	nw := n.Network
	switch {
	case nw.DHCP && (nw.Address != "" || nw.Gateway != ""):
		l.Addf(p.String(), "either dhcp: true or a static address and gateway, not both")
		return netip.Prefix{}, false
	case nw.DHCP:
		if n.IsMaster() {
			l.Addf(p.Field("dhcp").String(), "a %s needs a static address: the discovery zone and the certificates list it", n.Role)
		}
		return netip.Prefix{}, false
	case nw.Address == "":
		l.Addf(p.Field("address").String(), "required (an address with its prefix length, e.g. 192.168.10.11/24), or set dhcp: true")
		return netip.Prefix{}, false
	}
	pre, err := netip.ParsePrefix(nw.Address)
	if err != nil {
		l.Addf(p.Field("address").String(), "not an address with a prefix length (e.g. 192.168.10.11/24): %q", nw.Address)
		return netip.Prefix{}, false
	}
	if why := unusableAddress(pre.Addr()); why != "" {
		l.Addf(p.Field("address").String(), "%s is %s, not a node's address", pre.Addr(), why)
	} else if what := subnetAddress(pre, pre.Addr()); what != "" {
		l.Addf(p.Field("address").String(), "%s is the %s of its subnet, not a host address", pre.Addr(), what)
	}
	if nw.Gateway != "" {
		validateGateway(l, p.Field("gateway"), pre, nw.Gateway)
	}
	return pre, true
}

func validateGateway(l *validation.List, p validation.Path, pre netip.Prefix, v string) {
	gw, err := netip.ParseAddr(v)
	switch {
	case err != nil:
		l.Addf(p.String(), "not an IP address: %q", v)
	case !pre.Contains(gw):
		l.Addf(p.String(), "%s is outside the node's subnet %s", gw, pre.Masked())
	case gw == pre.Addr():
		l.Addf(p.String(), "%s is the node's own address", gw)
	case subnetAddress(pre, gw) != "":
		l.Addf(p.String(), "%s is the %s of the node's subnet %s, not a router's", gw, subnetAddress(pre, gw), pre.Masked())
	}
}

var nodeLocalDNS = netip.MustParseAddr(discovery.NodeLocalAddress)

// unusableAddress says why no node can have a, or returns "".
func unusableAddress(a netip.Addr) string {
	switch {
	case a == nodeLocalDNS:
		return "the node-local DNS address (every node's CoreDNS listens on it)"
	case a.IsUnspecified():
		return "the unspecified address"
	case a.IsLoopback():
		return "a loopback address"
	case a.IsMulticast():
		return "a multicast address"
	case a.IsLinkLocalUnicast():
		return "a link-local address"
	}
	return ""
}

// subnetAddress names what a is in p when it is no host's address: the
// network address, or for IPv4 the broadcast address; else "".
func subnetAddress(p netip.Prefix, a netip.Addr) string {
	switch {
	case p.Bits() >= a.BitLen()-1:
		return ""
	case a == p.Masked().Addr():
		return "network address"
	case a.Is4() && a == lastAddr(p):
		return "broadcast address"
	}
	return ""
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As16()
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	for i := bits; i < 128; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a := netip.AddrFrom16(b)
	if p.Addr().Is4() {
		return a.Unmap()
	}
	return a
}

// checkOverlaps reports pod, service and node networks that share
// addresses. Nodes on the same subnet are expected and not reported.
func checkOverlaps(nets []network, l *validation.List) {
	for i, a := range nets {
		for _, b := range nets[:i] {
			nodeA, nodeB := strings.HasPrefix(a.path, "nodes"), strings.HasPrefix(b.path, "nodes")
			if nodeA && nodeB || !a.prefix.Overlaps(b.prefix) {
				continue
			}
			l.Addf(a.path, "%s (%s) overlaps %s (%s, %s)", a.what, a.prefix, b.what, b.prefix, b.path)
		}
	}
}

// checkFamilies reports networks of another address family than the
// service network (or, when it is invalid, the first network): kiln sets
// up no dual-stack cluster.
func checkFamilies(nets []network, l *validation.List) {
	if len(nets) == 0 {
		return
	}
	service := validation.Path("cluster").Field("serviceCIDR").String()
	ref := nets[0]
	if i := slices.IndexFunc(nets, func(n network) bool { return n.path == service }); i >= 0 {
		ref = nets[i]
	}
	for _, n := range nets {
		if n.prefix.Addr().Is4() != ref.prefix.Addr().Is4() {
			l.Addf(n.path, "%s (%s) is %s but %s (%s, %s) is %s: kiln does not support dual-stack",
				n.what, n.prefix, family(n.prefix), ref.what, ref.prefix, ref.path, family(ref.prefix))
		}
	}
}

func family(p netip.Prefix) string {
	if p.Addr().Is4() {
		return "IPv4"
	}
	return "IPv6"
}

func cidr(l *validation.List, p validation.Path, v string) (netip.Prefix, bool) {
	pre, err := netip.ParsePrefix(v)
	switch {
	case v == "":
		l.Addf(p.String(), "required (a network in CIDR form, e.g. 10.96.0.0/12)")
	case err != nil:
		l.Addf(p.String(), "not a network in CIDR form: %q", v)
	case pre != pre.Masked():
		l.Addf(p.String(), "%s has host bits set; the network is %s", v, pre.Masked())
	default:
		return pre, true
	}
	return netip.Prefix{}, false
}

func dnsLabel(l *validation.List, p validation.Path, v string) bool {
	if v == "" {
		l.Addf(p.String(), "required")
		return false
	}
	if errs := k8svalidation.IsDNS1123Label(v); len(errs) > 0 {
		l.Addf(p.String(), "%q is not a DNS label: %s", v, errs[0])
		return false
	}
	return true
}

func validateLabels(l *validation.List, p validation.Path, labels map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		for _, e := range k8svalidation.IsQualifiedName(k) {
			l.Addf(p.Field(k).String(), "label key: %s", e)
		}
		for _, e := range k8svalidation.IsValidLabelValue(labels[k]) {
			l.Addf(p.Field(k).String(), "label value %q: %s", labels[k], e)
		}
	}
}

func refuseWorkerLabels(l *validation.List, p validation.Path, labels map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if why := nodefile.RefusedWorkerLabel(k); why != "" {
			l.Addf(p.Field(k).String(), "%s", why)
		}
	}
}

var sshKeyTypes = []string{"ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com"}

// checkSSHKey accepts one public key on one line, without options: the
// entry becomes a line of root's authorized_keys as it is.
func checkSSHKey(k string) error {
	if strings.ContainsAny(k, "\r\n") {
		return fmt.Errorf("holds a line break: give one key per entry, on one line (a further line would be an authorized_keys entry of its own)")
	}
	pub, _, options, _, err := ssh.ParseAuthorizedKey([]byte(k))
	switch {
	case err != nil:
		return fmt.Errorf("not an SSH public key in authorized_keys form (type base64 [comment]): %.40q", k)
	case len(options) > 0:
		return fmt.Errorf("authorized_keys options (%s) are not accepted: give the key alone", strings.Join(options, ","))
	case !contains(sshKeyTypes, pub.Type()):
		return fmt.Errorf("key type %s is not accepted: must be one of %s", pub.Type(), strings.Join(sshKeyTypes, ", "))
	}
	return nil
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
