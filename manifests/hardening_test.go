package manifests

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/kiln-project/kiln/contract/nodefile"
)

// renderedFiles are a genesis node's files by path, as the role writes
// them.
func renderedFiles(t *testing.T) map[string][]byte {
	t.Helper()
	files, err := Files(GenesisParams(node("m1", "genesis", "192.168.10.11"), testImages))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		out[f.Path] = f.Content
	}
	return out
}

// renderedPod parses a static pod as the kubelet reads it.
func renderedPod(t *testing.T, files map[string][]byte, name string) *corev1.Pod {
	t.Helper()
	data, ok := files[StaticPodDir+"/"+name+".yaml"]
	if !ok {
		t.Fatalf("no static pod %s", name)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return &pod
}

var strongCiphers = strings.Join(TLSCipherSuites, ",")

// Every control-plane component against the CIS benchmark items kiln
// meets, as rendered for a genesis node.
func TestControlPlaneFlagsHarden(t *testing.T) {
	files := renderedFiles(t)
	tlsFlags := map[string]string{"tls-min-version": "VersionTLS12", "tls-cipher-suites": strongCiphers}
	for _, tc := range []struct {
		pod    string
		want   map[string]string
		absent []string
	}{
		{"kube-apiserver", map[string]string{
			"profiling":                     "false",
			"encryption-provider-config":    EncryptionConfigPath,
			"kubelet-certificate-authority": PKIDir + "/ca.crt",
			"authentication-config":         AuthnConfigPath,
			"audit-policy-file":             AuditPolicyPath,
			"audit-log-path":                AuditLogPath,
			"audit-log-maxage":              "30",
			"audit-log-maxbackup":           "5",
			"audit-log-maxsize":             "50",
		}, []string{"anonymous-auth", "insecure-port"}},
		{"kube-controller-manager", map[string]string{"profiling": "false"}, nil},
		{"kube-scheduler", map[string]string{"profiling": "false"}, nil},
	} {
		t.Run(tc.pod, func(t *testing.T) {
			flags := flagsOf(renderedPod(t, files, tc.pod))
			for name, want := range mergeMaps(tc.want, tlsFlags) {
				if got, ok := flags[name]; !ok || got != want {
					t.Errorf("--%s=%q, want %q (set: %v)", name, got, want, ok)
				}
			}
			for _, name := range tc.absent {
				if _, ok := flags[name]; ok {
					t.Errorf("--%s is set", name)
				}
			}
		})
	}
}

func mergeMaps(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range []map[string]string{a, b} {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// The apiserver checks every kubelet's serving certificate, whatever the
// site's addresses; a DHCP node's kubelet asks for its certificate (it
// has no address when kiln gen runs), a static node's uses kiln gen's.
func TestEveryKubeletIsVerified(t *testing.T) {
	for _, addr := range []string{"192.168.10.21", ""} {
		n := node("w1", "worker", addr)
		m := node("m1", "genesis", "192.168.10.11")
		m.SiteNodes = map[string]string{"m1": "192.168.10.11", "w1": addr}
		got, set := flagsOf(APIServer(GenesisParams(m, testImages)))["kubelet-certificate-authority"]
		if !set || got != PKIDir+"/ca.crt" {
			t.Errorf("site with w1 at %q: --kubelet-certificate-authority=%q (set: %v)", addr, got, set)
		}
		k := KubeletConfig(GenesisParams(n, testImages))
		byCSR := k.ServerTLSBootstrap && k.TLSCertFile == "" && k.TLSPrivateKeyFile == ""
		byFile := !k.ServerTLSBootstrap && k.TLSCertFile == PKIDir+"/kubelet-server.crt"
		if (addr == "" && !byCSR) || (addr != "" && !byFile) {
			t.Errorf("w1 at %q: serverTLSBootstrap %v, tlsCertFile %q", addr, k.ServerTLSBootstrap, k.TLSCertFile)
		}
	}
}

// The files the apiserver's flags name are rendered, and say what the
// flags promise.
func TestAPIServerConfigFiles(t *testing.T) {
	files := renderedFiles(t)
	for _, tc := range []struct {
		path string
		want []string
	}{
		{AuthnConfigPath, []string{"kind: AuthenticationConfiguration", "enabled: true", "- path: /livez", "- path: /readyz", "- path: /healthz"}},
		{AuditPolicyPath, []string{"kind: Policy", "- RequestReceived", "- level: Metadata"}},
	} {
		got, ok := files[tc.path]
		if !ok {
			t.Errorf("%s is not rendered", tc.path)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(string(got), w) {
				t.Errorf("%s lacks %q:\n%s", tc.path, w, got)
			}
		}
	}
	var authn struct {
		Anonymous struct {
			Conditions []struct{ Path string }
		}
	}
	if err := yaml.Unmarshal(files[AuthnConfigPath], &authn); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, c := range authn.Anonymous.Conditions {
		paths = append(paths, c.Path)
	}
	if !slices.Equal(paths, HealthPaths) {
		t.Errorf("anonymous paths %v, want exactly %v", paths, HealthPaths)
	}
}

// No audit rule records a request or response body: a Secret's data
// would land in the log.
func TestAuditPolicyRecordsNoBodies(t *testing.T) {
	var policy struct {
		OmitStages []string `json:"omitStages"`
		Rules      []struct {
			Level string `json:"level"`
		} `json:"rules"`
	}
	if err := yaml.Unmarshal([]byte(AuditPolicy), &policy); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(policy.OmitStages, "RequestReceived") {
		t.Errorf("omitStages %v lacks RequestReceived", policy.OmitStages)
	}
	if len(policy.Rules) == 0 || policy.Rules[len(policy.Rules)-1].Level != "Metadata" {
		t.Errorf("the last rule is not the Metadata catch-all: %+v", policy.Rules)
	}
	for i, r := range policy.Rules {
		if r.Level != "None" && r.Level != "Metadata" {
			t.Errorf("rule %d: level %s records bodies", i, r.Level)
		}
	}
}

// The kubelet and etcd accept TLS 1.2 or later with the strong ciphers only.
func TestKubeletAndEtcdTLS(t *testing.T) {
	files := renderedFiles(t)
	var kc kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict(files["/etc/kiln/kubelet.yaml"], &kc); err != nil {
		t.Fatal(err)
	}
	if kc.TLSMinVersion != "VersionTLS12" || !slices.Equal(kc.TLSCipherSuites, TLSCipherSuites) {
		t.Errorf("kubelet: tlsMinVersion %q, tlsCipherSuites %v", kc.TLSMinVersion, kc.TLSCipherSuites)
	}
	var etcd struct {
		MinVersion   string   `json:"tls-min-version"`
		CipherSuites []string `json:"cipher-suites"`
	}
	if err := yaml.Unmarshal(files[EtcdConfigPath], &etcd); err != nil {
		t.Fatal(err)
	}
	if etcd.MinVersion != "TLS1.2" || !slices.Equal(etcd.CipherSuites, TLSCipherSuites) {
		t.Errorf("etcd: tls-min-version %q, cipher-suites %v", etcd.MinVersion, etcd.CipherSuites)
	}
}

// The first add-on binds the operator's group to cluster-admin, so the
// operator's admin.kubeconfig works once the genesis node is done.
func TestClusterAdminsBoundFirst(t *testing.T) {
	objs := AddOns(GenesisParams(node("m1", "genesis", "192.168.10.11"), testImages))
	b, ok := objs[0].(*rbacv1.ClusterRoleBinding)
	if !ok {
		t.Fatalf("the first add-on is a %T", objs[0])
	}
	want := rbacv1.Subject{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: nodefile.ClusterAdminsGroup}
	if b.RoleRef.Name != "cluster-admin" || len(b.Subjects) != 1 || b.Subjects[0] != want {
		t.Errorf("binding %s: role %s, subjects %+v", b.Name, b.RoleRef.Name, b.Subjects)
	}
}
