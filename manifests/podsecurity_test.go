package manifests

import (
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kiln-project/kiln/contract/nodefile"
)

// renderedPods are every pod kiln renders, static or templated, by name,
// for the variant of the site: the default timing profile and port
// 6443, the slow profile (etcd under rt-exec) or a privileged port.
func renderedPods(t *testing.T, variant string) map[string]corev1.PodSpec {
	t.Helper()
	n := node("m1", "genesis", "192.168.10.11")
	switch variant {
	case "slow":
		n.Cluster.Timing = nodefile.TimingSlow
	case "port 443":
		n.Cluster.APIServerPort = 443
	}
	p := GenesisParams(n, testImages)
	out := map[string]corev1.PodSpec{}
	for _, pod := range append(ControlPlane(p), NodeLocalDNS(p)) {
		out[pod.Name] = pod.Spec
	}
	for name, spec := range podSpecs(AddOns(p)) {
		out[name] = spec
	}
	return out
}

// podNeeds is what each pod kiln runs keeps of its privileges: the
// capabilities it adds back after dropping them all, or privileged.
var podNeeds = map[string]struct {
	add        []corev1.Capability
	privileged bool
}{
	"etcd":                      {},
	"kube-apiserver":            {},
	"kube-controller-manager":   {},
	"kube-scheduler":            {},
	"kiln-node-dns":             {add: []corev1.Capability{"NET_BIND_SERVICE"}},
	"coredns":                   {add: []corev1.Capability{"NET_BIND_SERVICE"}},
	"kiln-net":                  {add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}},
	"kube-proxy":                {privileged: true},
	"kiln-anchor-control-plane": {},
	"kiln-anchor-discovery":     {},
}

// Every pod kiln runs has the runtime's default seccomp profile; every
// container but kube-proxy's drops every capability and adds back only
// what its pod needs, cannot gain privileges, and has a read-only root
// filesystem.
func TestEveryPodIsConfined(t *testing.T) {
	for _, variant := range []string{"default", "slow", "port 443"} {
		pods := renderedPods(t, variant)
		if got, want := slices.Sorted(maps.Keys(pods)), slices.Sorted(maps.Keys(podNeeds)); !slices.Equal(got, want) {
			t.Fatalf("%s: pods %v, want those podNeeds lists %v", variant, got, want)
		}
		for name, spec := range pods {
			t.Run(variant+"/"+name, func(t *testing.T) {
				need := podNeeds[name]
				switch {
				case variant == "slow" && name == "etcd":
					need.add = []corev1.Capability{"SYS_NICE"}
				case variant == "port 443" && name == "kube-apiserver":
					need.add = []corev1.Capability{"NET_BIND_SERVICE"}
				}
				if sc := spec.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
					t.Errorf("pod security context %+v, want seccomp RuntimeDefault", sc)
				}
				for _, c := range append(spec.InitContainers, spec.Containers...) {
					checkContainer(t, c, need.add, need.privileged)
				}
			})
		}
	}
}

func checkContainer(t *testing.T, c corev1.Container, add []corev1.Capability, privileged bool) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil {
		t.Errorf("%s: no security context", c.Name)
		return
	}
	if sc.SeccompProfile != nil && sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: seccomp %s", c.Name, sc.SeccompProfile.Type)
	}
	if privileged {
		if sc.Privileged == nil || !*sc.Privileged {
			t.Errorf("%s: not privileged, which podNeeds says it needs", c.Name)
		}
		return
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("%s: privileged", c.Name)
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("%s: capabilities %+v, want every one dropped", c.Name, sc.Capabilities)
	} else if got := slices.Sorted(slices.Values(sc.Capabilities.Add)); !slices.Equal(got, add) {
		t.Errorf("%s: adds %v, want %v", c.Name, got, add)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation is not false", c.Name)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: the root filesystem is writable", c.Name)
	}
}

// hostNeeds are the host paths each pod mounts outside /etc/kiln, and
// whether it writes there (true): exactly these.
var hostNeeds = map[string]map[string]bool{
	"etcd":                    {EtcdDataDir: true, EtcdConfigDir: false},
	"kube-apiserver":          {AuditLogDir: true},
	"kube-controller-manager": {},
	"kube-scheduler":          {},
	"kiln-node-dns":           {DNSDir: false},
	"coredns":                 {},
	"kiln-net":                {nodefile.KilnBinary: false, CNIConfDir: true, XtablesLock: true},
	"kube-proxy":              {XtablesLock: true, "/lib/modules": false},
	"kiln-anchor-discovery":   {nodefile.KilnBinary: false, DNSDir: true},
	"kiln-anchor-control-plane": {nodefile.KilnBinary: false, DNSDir: true, CatalogFile: false,
		StaticPodDir: true, AnchorBackupDir: true, EtcdConfigDir: true},
}

// Every pod mounts, outside /etc/kiln, exactly the host paths it needs,
// writable only where it writes; under /etc/kiln only read-only files.
func TestEveryPodMountsOnlyTheHostPathsItNeeds(t *testing.T) {
	for name, spec := range renderedPods(t, "default") {
		t.Run(name, func(t *testing.T) {
			want, ok := hostNeeds[name]
			if !ok {
				t.Fatalf("hostNeeds does not list %s", name)
			}
			got := map[string]bool{}
			for _, v := range spec.Volumes {
				if v.HostPath == nil {
					continue
				}
				writable := false
				for _, c := range spec.Containers {
					for _, m := range c.VolumeMounts {
						writable = writable || (m.Name == v.Name && !m.ReadOnly)
					}
				}
				if exposes(nodefile.Dir, v.HostPath.Path) {
					if writable || v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathFile {
						t.Errorf("mounts %s (type %v) writable %v, want a file, read-only", v.HostPath.Path, v.HostPath.Type, writable)
					}
					continue
				}
				got[v.HostPath.Path] = writable
			}
			if !maps.Equal(got, want) {
				t.Errorf("host paths (path: writable) %v, want %v", got, want)
			}
		})
	}
}

// The anchors read the kubernetes Endpoints in default and no other:
// every rule bound to their service accounts that names endpoints names
// that object, in that namespace, for get alone.
func TestAnchorsReadOnlyTheKubernetesEndpoints(t *testing.T) {
	objs := AddOns(GenesisParams(node("m1", "genesis", "192.168.10.11"), testImages))
	for _, sa := range []string{OthersAnchor, MastersAnchor} {
		t.Run(sa, func(t *testing.T) {
			rules := rulesOf(objs, sa)
			found := false
			for _, r := range rules {
				if !slices.Contains(r.rule.Resources, "endpoints") && !slices.Contains(r.rule.Resources, "*") {
					continue
				}
				found = true
				if r.namespace != DiscoveryNamespace || !slices.Equal(r.rule.ResourceNames, []string{DiscoveryEndpoints}) || !slices.Equal(r.rule.Verbs, []string{"get"}) {
					t.Errorf("rule %+v in namespace %q: want get of %s/%s only", r.rule, r.namespace, DiscoveryNamespace, DiscoveryEndpoints)
				}
			}
			if !found {
				t.Errorf("no rule lets %s read the %s Endpoints", sa, DiscoveryEndpoints)
			}
		})
	}
}

type boundRule struct {
	namespace string // "" for a ClusterRole's
	rule      rbacv1.PolicyRule
}

// rulesOf are the rules of every Role and ClusterRole among objs bound to
// kube-system's service account sa.
func rulesOf(objs []runtime.Object, sa string) []boundRule {
	roles := map[string][]rbacv1.PolicyRule{}
	for _, o := range objs {
		switch o := o.(type) {
		case *rbacv1.ClusterRole:
			roles["ClusterRole/"+o.Name] = o.Rules
		case *rbacv1.Role:
			roles["Role/"+o.Namespace+"/"+o.Name] = o.Rules
		}
	}
	bound := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == "ServiceAccount" && s.Name == sa && s.Namespace == "kube-system"
		})
	}
	var out []boundRule
	for _, o := range objs {
		switch o := o.(type) {
		case *rbacv1.ClusterRoleBinding:
			if bound(o.Subjects) {
				for _, r := range roles[o.RoleRef.Kind+"/"+o.RoleRef.Name] {
					out = append(out, boundRule{"", r})
				}
			}
		case *rbacv1.RoleBinding:
			if !bound(o.Subjects) {
				continue
			}
			key := "ClusterRole/" + o.RoleRef.Name
			if o.RoleRef.Kind == "Role" {
				key = "Role/" + o.Namespace + "/" + o.RoleRef.Name
			}
			for _, r := range roles[key] {
				out = append(out, boundRule{o.Namespace, r})
			}
		}
	}
	return out
}
