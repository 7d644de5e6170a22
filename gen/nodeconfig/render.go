package nodeconfig

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"

	"github.com/coreos/ignition/v2/config/v3_5/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kiln-project/kiln/contract/discovery"
	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/ignition"
)

// Render returns node n's Ignition config, validated with the same parser
// the agent uses.
func Render(s *site.Site, st pki.Store, n site.Node) ([]byte, error) {
	return render(s, st, n, nil)
}

// render is Render with the configs the node may fall back to in its
// node file.
func render(s *site.Site, st pki.Store, n site.Node, fallback []string) ([]byte, error) {
	var files []types.File
	add := func(path string, data []byte) {
		files = append(files, file(path, data, isSecret(path)))
	}

	add(HostnamePath, []byte(n.Name+"\n"))
	add(NetworkPath, networkUnit(s, n))
	f := nodeFile(s, n)
	f.FallbackConfigs = fallback
	nf, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, err
	}
	add(NodeFilePath, append(nf, '\n'))
	add(ZonePath, SeedZone(s).Render())
	for _, f := range registryFiles(s) {
		add(f.path, f.data)
	}
	for _, g := range grantsFor(n) {
		data, err := st.File(g.from)
		if err != nil {
			return nil, fmt.Errorf("node %s needs %s from the PKI: %w", n.Name, g.from, err)
		}
		add(g.to, data)
	}
	if n.IsMaster() {
		key, err := st.EncryptionKey()
		if err != nil {
			return nil, fmt.Errorf("node %s needs the Secrets encryption key: %w", n.Name, err)
		}
		add(EncryptionConfigPath, EncryptionConfig(key))
	}
	server := fmt.Sprintf("https://%s", net.JoinHostPort(s.Cluster.DiscoveryName, fmt.Sprint(s.Cluster.APIServerPort)))
	local := fmt.Sprintf("https://%s", net.JoinHostPort("127.0.0.1", fmt.Sprint(s.Cluster.APIServerPort)))
	for _, k := range kubeconfigsFor(n) {
		url := server
		if k.local {
			url = local // the apiserver certificate names 127.0.0.1
		}
		data, err := Kubeconfig(s, st, url, k.stem)
		if err != nil {
			return nil, fmt.Errorf("node %s: kubeconfig %s: %w", n.Name, k.name, err)
		}
		add(KubeconfigDir+"/"+k.name, data)
	}
	if f, ok, err := restoreFile(s, n); err != nil {
		return nil, fmt.Errorf("node %s: the etcd snapshot to restore: %w", n.Name, err)
	} else if ok {
		files = append(files, f)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })

	cfg := types.Config{
		Ignition: types.Ignition{Version: IgnitionSpec},
		Storage:  types.Storage{Files: files},
		Systemd:  types.Systemd{Units: snapshotUnits(s, n)},
	}
	if len(s.Cluster.SSHAuthorizedKeys) > 0 {
		u := types.PasswdUser{Name: "root"}
		for _, k := range s.Cluster.SSHAuthorizedKeys {
			u.SSHAuthorizedKeys = append(u.SSHAuthorizedKeys, types.SSHAuthorizedKey(k))
		}
		cfg.Passwd.Users = []types.PasswdUser{u}
	}
	if n.InstallDisk != "" {
		cfg.Storage.Disks, cfg.Storage.Filesystems = statePartition(n.InstallDisk)
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	data = append(data, '\n')
	if _, _, err := ignition.Parse(data); err != nil {
		return nil, fmt.Errorf("node %s: the rendered config does not validate: %w", n.Name, err)
	}
	return data, nil
}

// SeedZone is the discovery zone listing every master, serial 1; the
// CoreDNS anchor takes over from there.
func SeedZone(s *site.Site) discovery.Zone {
	z := discovery.Zone{Name: s.Cluster.DiscoveryName, Serial: 1}
	for _, m := range s.Masters() {
		z.APIServers = append(z.APIServers, m.IP())
	}
	return z
}

// file is an Ignition file owned by root, replacing what the image has;
// secrets are 0600, everything else 0644.
func file(path string, data []byte, secret bool) types.File {
	mode, root, yes := 0o644, 0, true
	if secret {
		mode = 0o600
	}
	src := "data:;base64," + base64.StdEncoding.EncodeToString(data)
	return types.File{
		Node: types.Node{Path: path, Overwrite: &yes, User: types.NodeUser{ID: &root}, Group: types.NodeGroup{ID: &root}},
		FileEmbedded1: types.FileEmbedded1{
			Mode:     &mode,
			Contents: types.Resource{Source: &src},
		},
	}
}

// statePartition asks the agent for the state partition on the install
// disk, in its free space: the table is kept (a raw image written to the
// disk has its own partitions there).
func statePartition(disk string) ([]types.Disk, []types.Filesystem) {
	label, format, device := StatePartLabel, "ext4", "/dev/disk/by-partlabel/"+StatePartLabel
	return []types.Disk{{Device: disk, Partitions: []types.Partition{{Label: &label}}}},
		[]types.Filesystem{{Device: device, Format: &format, Label: &label}}
}

// networkUnit is the systemd-networkd file for the node's primary NIC,
// matched by MAC address.
func networkUnit(s *site.Site, n site.Node) []byte {
	var b strings.Builder
	b.WriteString("# written by kiln gen from the site file\n[Match]\n")
	macs := make([]string, len(n.MACs))
	for i, m := range n.MACs {
		hw, _ := net.ParseMAC(m)
		macs[i] = hw.String()
	}
	fmt.Fprintf(&b, "MACAddress=%s\n\n[Network]\n", strings.Join(macs, " "))
	if n.Network.DHCP {
		b.WriteString("DHCP=yes\n")
	} else {
		fmt.Fprintf(&b, "Address=%s\n", n.Network.Address)
		if n.Network.Gateway != "" {
			fmt.Fprintf(&b, "Gateway=%s\n", n.Network.Gateway)
		}
	}
	for _, d := range s.Cluster.UpstreamDNS {
		fmt.Fprintf(&b, "DNS=%s\n", d)
	}
	for _, t := range s.Cluster.NTPServers {
		fmt.Fprintf(&b, "NTP=%s\n", t)
	}
	return []byte(b.String())
}

// Kubeconfig returns a kubeconfig for server that authenticates with the
// client certificate stem and trusts the Kubernetes CA, all embedded.
func Kubeconfig(s *site.Site, st pki.Store, server, stem string) ([]byte, error) {
	ca, err := st.Cert(pki.KubernetesCA.Stem)
	if err != nil {
		return nil, err
	}
	p, err := st.Pair(stem)
	if err != nil {
		return nil, err
	}
	user := strings.ReplaceAll(stem, "/", "-")
	name := s.Cluster.Name
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: p.Cert, ClientKeyData: p.Key}
	cfg.Contexts[user+"@"+name] = &clientcmdapi.Context{Cluster: name, AuthInfo: user}
	cfg.CurrentContext = user + "@" + name
	return clientcmd.Write(*cfg)
}

// AdminKubeconfigFor is the operator's kubeconfig: one context per
// master (admin@<cluster>-<master>), each reaching that master's
// address and checking its certificate for the discovery name, which
// every apiserver certificate carries and which only the nodes resolve.
// The current context is the genesis node's; when a master is down,
// `kubectl --context admin@<cluster>-<other master>` reaches another.
// Its user is in the cluster-admins group, which RBAC binds.
func AdminKubeconfigFor(s *site.Site, st pki.Store) ([]byte, error) {
	return operatorKubeconfig(s, st, pki.AdminStem)
}

// SuperAdminKubeconfigFor is the break-glass kubeconfig, laid out like
// the admin's: its user is in system:masters, which RBAC cannot refuse.
// It is written to the operator's output only, never to a node.
func SuperAdminKubeconfigFor(s *site.Site, st pki.Store) ([]byte, error) {
	return operatorKubeconfig(s, st, pki.SuperAdminStem)
}

// operatorKubeconfig is a kubeconfig with the client certificate stem,
// which also names its user and contexts, and a context per master.
func operatorKubeconfig(s *site.Site, st pki.Store, stem string) ([]byte, error) {
	ca, err := st.Cert(pki.KubernetesCA.Stem)
	if err != nil {
		return nil, err
	}
	p, err := st.Pair(stem)
	if err != nil {
		return nil, err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.AuthInfos[stem] = &clientcmdapi.AuthInfo{ClientCertificateData: p.Cert, ClientKeyData: p.Key}
	for i, m := range s.Masters() {
		name := s.Cluster.Name + "-" + m.Name
		cfg.Clusters[name] = &clientcmdapi.Cluster{Server: APIServerURL(s, m), TLSServerName: s.Cluster.DiscoveryName, CertificateAuthorityData: ca}
		cfg.Contexts[OperatorContext(s, stem, m)] = &clientcmdapi.Context{Cluster: name, AuthInfo: stem}
		if i == 0 {
			cfg.CurrentContext = OperatorContext(s, stem, m)
		}
	}
	return clientcmd.Write(*cfg)
}

// OperatorContext names the context of an operator's kubeconfig (the
// client certificate stem, e.g. pki.AdminStem) that reaches master m:
// <stem>@<cluster>-<master>.
func OperatorContext(s *site.Site, stem string, m site.Node) string {
	return stem + "@" + s.Cluster.Name + "-" + m.Name
}

// APIServerURL is master m's apiserver at its own address.
func APIServerURL(s *site.Site, m site.Node) string {
	return "https://" + netip.AddrPortFrom(m.IP(), uint16(s.Cluster.APIServerPort)).String()
}
