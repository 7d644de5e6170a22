package manifests

import (
	"strings"

	"github.com/kiln-project/kiln/contract/nodefile"
)

// The apiserver's configuration files: the role renders the audit policy
// and the authentication configuration on every boot; kiln gen writes the
// encryption configuration, which holds the key. Only the apiserver
// mounts any of them.
const (
	APIServerConfigDir   = nodefile.APIServerConfigDir
	AuditPolicyPath      = APIServerConfigDir + "/audit-policy.yaml"
	AuthnConfigPath      = APIServerConfigDir + "/authentication.yaml"
	EncryptionConfigPath = nodefile.EncryptionConfigPath
)

// AuditLogDir is where the apiserver writes its audit log: under
// /var/log, which is on the state partition.
const (
	AuditLogDir  = "/var/log/kubernetes/audit"
	AuditLogPath = AuditLogDir + "/audit.log"
)

// The audit log's rotation: at most auditMaxBackups+1 files of
// auditMaxSizeMB, none older than auditMaxAgeDays.
const (
	auditMaxAgeDays = "30"
	auditMaxBackups = "5"
	auditMaxSizeMB  = "50"
)

// TLSMinVersion is the oldest TLS every kiln component accepts, and
// TLSCipherSuites the TLS 1.2 suites it offers: ECDHE key exchange and an
// AEAD cipher only (TLS 1.3 suites are not configurable and all strong).
// The names are Go's, which Kubernetes and etcd both accept.
const TLSMinVersion = "VersionTLS12"

var TLSCipherSuites = []string{
	"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
	"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
	"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
	"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
	"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
}

// tlsFlags are the TLS flags of the apiserver, controller-manager and
// scheduler.
func tlsFlags() []arg {
	return []arg{
		{"tls-min-version", TLSMinVersion},
		{"tls-cipher-suites", strings.Join(TLSCipherSuites, ",")},
	}
}

// HealthPaths are the only paths an anonymous request may reach on the
// apiserver: what the kubelet's probes and a load balancer's health check
// ask for. The bootstrap RBAC role system:public-info-viewer lets them
// through; every other anonymous request is refused before authorization.
var HealthPaths = []string{"/livez", "/readyz", "/healthz"}

// AuthnConfig is the apiserver's structured authentication configuration:
// anonymous requests only to the health paths. With it, --anonymous-auth
// must not be set (the apiserver refuses both).
func AuthnConfig() string {
	var b strings.Builder
	b.WriteString("# written by kiln: anonymous requests reach the health endpoints only\n")
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\nanonymous:\n  enabled: true\n  conditions:\n")
	for _, p := range HealthPaths {
		b.WriteString("  - path: " + p + "\n")
	}
	return b.String()
}

// AuditPolicy records who did what to which object, never a request or
// response body (so no Secret's data, no token), once per request at its
// response; the probes' health requests and the kubelets' and
// controllers' endless reads of events are left out.
const AuditPolicy = `# written by kiln: metadata of every request, no bodies
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages:
- RequestReceived
rules:
- level: None
  nonResourceURLs:
  - /healthz*
  - /livez*
  - /readyz*
  - /version
- level: None
  resources:
  - group: ""
    resources:
    - events
  - group: events.k8s.io
    resources:
    - events
- level: Metadata
`

// apiServerHardening are the apiserver's hardening flags: Secrets
// encrypted in etcd, anonymous access limited by the authentication
// configuration, the audit log, no profiling, and every kubelet checked
// against the CA that issued its serving certificate: kiln gen's for a
// static node, the controller-manager's (through a request the masters'
// anchor approves) for a DHCP node.
func apiServerHardening(p Params) []arg {
	flags := []arg{
		{"encryption-provider-config", EncryptionConfigPath},
		{"authentication-config", AuthnConfigPath},
		{"kubelet-certificate-authority", pki("ca.crt")},
	}
	flags = append(flags,
		arg{"profiling", "false"},
		arg{"audit-policy-file", AuditPolicyPath},
		arg{"audit-log-path", AuditLogPath},
		arg{"audit-log-maxage", auditMaxAgeDays},
		arg{"audit-log-maxbackup", auditMaxBackups},
		arg{"audit-log-maxsize", auditMaxSizeMB},
	)
	return append(flags, tlsFlags()...)
}

// componentHardening are the controller-manager's and scheduler's.
func componentHardening() []arg {
	return append([]arg{{"profiling", "false"}}, tlsFlags()...)
}
