package manifests

import (
	"fmt"

	"sigs.k8s.io/yaml"
)

// EtcdConfigPath is etcd's configuration file, on the state partition
// beside the membership record. etcd's static pod only names it, so the
// pod never changes when the membership does (a genesis record turning
// existing once bootstrapped would otherwise restart etcd mid-bootstrap);
// etcd reads it at its next start, the only time the initial-* settings
// count.
const (
	EtcdConfigDir  = "/var/lib/kiln/etcd"
	EtcdConfigPath = EtcdConfigDir + "/etcd.conf.yaml"
)

// etcdTLSMinVersion is TLSMinVersion as etcd spells it.
const etcdTLSMinVersion = "TLS1.2"

// etcdTLS is a transport-security block of etcd's configuration file.
type etcdTLS struct {
	CertFile       string `json:"cert-file"`
	KeyFile        string `json:"key-file"`
	TrustedCAFile  string `json:"trusted-ca-file"`
	ClientCertAuth bool   `json:"client-cert-auth"`
}

// files are the block's certificate, key and CA files.
func (t etcdTLS) files() []string { return []string{t.CertFile, t.KeyFile, t.TrustedCAFile} }

// etcdTransport is etcd's TLS for clients and peers: its own
// certificates, the etcd CA, client certificates required. These are the
// only PKI files etcd's pod mounts.
func etcdTransport() (client, peer etcdTLS) {
	return etcdTLS{pki("etcd-server.crt"), pki("etcd-server.key"), pki("etcd/ca.crt"), true},
		etcdTLS{pki("etcd-peer.crt"), pki("etcd-peer.key"), pki("etcd/ca.crt"), true}
}

// etcdConfig is etcd's configuration file (etcd.conf.yml's keys): with
// --config-file etcd reads nothing else.
type etcdConfig struct {
	Name                     string   `json:"name"`
	DataDir                  string   `json:"data-dir"`
	ListenClientURLs         string   `json:"listen-client-urls"`
	AdvertiseClientURLs      string   `json:"advertise-client-urls"`
	ListenPeerURLs           string   `json:"listen-peer-urls"`
	InitialAdvertisePeerURLs string   `json:"initial-advertise-peer-urls"`
	InitialCluster           string   `json:"initial-cluster"`
	InitialClusterState      string   `json:"initial-cluster-state"`
	ListenMetricsURLs        string   `json:"listen-metrics-urls"`
	SnapshotCount            int      `json:"snapshot-count"`
	HeartbeatInterval        int64    `json:"heartbeat-interval"`
	ElectionTimeout          int64    `json:"election-timeout"`
	ClientTransportSecurity  etcdTLS  `json:"client-transport-security"`
	PeerTransportSecurity    etcdTLS  `json:"peer-transport-security"`
	TLSMinVersion            string   `json:"tls-min-version"`
	CipherSuites             []string `json:"cipher-suites"`
}

// EtcdConfig renders the node's etcd configuration: TLS 1.2 or later
// with strong ciphers for clients and peers, data on the state partition, the membership from the record.
func EtcdConfig(p Params) ([]byte, error) {
	ip, t := p.Node.Address, timing(p)
	client, peer := etcdTransport()
	c := etcdConfig{
		Name:                     p.Node.Name,
		DataDir:                  EtcdDataDir,
		ListenClientURLs:         fmt.Sprintf("https://127.0.0.1:2379,https://%s:2379", ip),
		AdvertiseClientURLs:      fmt.Sprintf("https://%s:2379", ip),
		ListenPeerURLs:           fmt.Sprintf("https://%s:2380", ip),
		InitialAdvertisePeerURLs: fmt.Sprintf("https://%s:2380", ip),
		InitialCluster:           p.EtcdInitialCluster,
		InitialClusterState:      p.EtcdClusterState,
		ListenMetricsURLs:        "http://127.0.0.1:2381",
		SnapshotCount:            10000,
		HeartbeatInterval:        t.EtcdHeartbeat.Milliseconds(),
		ElectionTimeout:          t.EtcdElection.Milliseconds(),
		ClientTransportSecurity:  client,
		PeerTransportSecurity:    peer,
		TLSMinVersion:            etcdTLSMinVersion,
		CipherSuites:             TLSCipherSuites,
	}
	data, err := yaml.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("etcd configuration: %w", err)
	}
	return append([]byte("# etcd's configuration, written by kiln from the node file and its etcd membership record\n"), data...), nil
}
