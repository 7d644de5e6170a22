package manifests

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// KubeletConfig is the kubelet's configuration file: cgroup v2 through
// systemd, no anonymous access, webhook authorization, TLS 1.2 or later
// with strong ciphers, client certificate rotation, static pods from the state partition, and pods resolving
// through cluster DNS (not the node-local CoreDNS), and the timing
// profile's Node lease.
func KubeletConfig(p Params) *kubeletv1beta1.KubeletConfiguration {
	no, yes := false, true
	c := p.Node.Cluster
	t := timing(p)
	return &kubeletv1beta1.KubeletConfiguration{
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
}

func ptr[T any](v T) *T { return &v }
