package manifests

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// KubeletConfig is the kubelet's configuration file: cgroup v2 through
// systemd, no anonymous access, webhook authorization, TLS 1.2 or later
// with strong ciphers, client certificate rotation, static pods from the
// state partition, pods resolving through cluster DNS (not the node-local
// CoreDNS), and the timing profile's Node lease. Its serving certificate
// is kiln gen's on a static node and requested from the cluster
// (serverTLSBootstrap, approved by the masters' anchor) on a DHCP node.
func KubeletConfig(p Params) *kubeletv1beta1.KubeletConfiguration {
	no, yes := false, true
	c := p.Node.Cluster
	t := timing(p)
	k := &kubeletv1beta1.KubeletConfiguration{
		TypeMeta:                 metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		StaticPodPath:            StaticPodDir,
		CgroupDriver:             "systemd",
		ContainerRuntimeEndpoint: ContainerdSock,
		Authentication: kubeletv1beta1.KubeletAuthentication{
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: &no},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: &yes},
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: pki("ca.crt")},
		},
		Authorization:            kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		TLSCertFile:              pki("kubelet-server.crt"),
		TLSPrivateKeyFile:        pki("kubelet-server.key"),
		RotateCertificates:       true,
		TLSMinVersion:            TLSMinVersion,
		TLSCipherSuites:          TLSCipherSuites,
		ClusterDomain:            c.Domain,
		ClusterDNS:               []string{c.ClusterDNS},
		ResolverConfig:           ptr(PodResolvConf),
		FailSwapOn:               &no,
		ProtectKernelDefaults:    true,
		NodeLeaseDurationSeconds: int32(t.NodeLease / time.Second),
	}
	if p.Node.ServingCertByCSR() {
		k.TLSCertFile, k.TLSPrivateKeyFile, k.ServerTLSBootstrap = "", "", true
	}
	return k
}

func ptr[T any](v T) *T { return &v }
