package manifests

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/golden"
)

var testImages = Images{
	Etcd: "kiln.local/etcd:v3.6.5", APIServer: "kiln.local/kube-apiserver:v1.37.1",
	ControllerManager: "kiln.local/kube-controller-manager:v1.37.1", Scheduler: "kiln.local/kube-scheduler:v1.37.1",
	Proxy: "kiln.local/kube-proxy:v1.37.1", CoreDNS: "kiln.local/coredns:v1.15.0",
	Pause: "kiln.local/pause:0123456789ab", Kiln: "kiln.local/kiln:0123456789ab",
}

func node(name, role, addr string) nodefile.NodeFile {
	return nodefile.NodeFile{
		APIVersion: "kiln.dev/v1alpha1", Kind: nodefile.Kind, Name: name, Role: role, Address: addr,
		Cluster: nodefile.ClusterParams{
			Name: "lab", KubernetesVersion: "v1.37.1", Domain: "cluster.local",
			PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", ClusterDNS: "10.96.0.10",
			APIServerPort: 6443, DiscoveryName: "kube-apiserver.kiln.internal", NodeLocalDNS: "169.254.20.10",
			UpstreamDNS: []string{"192.168.10.1"},
		},
		Masters: []nodefile.Member{{Name: "m1", Address: "192.168.10.11"}},
	}
}

// The rendered files of a genesis node and a worker, byte for byte.
func TestGoldenFiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Params
	}{
		{"genesis", GenesisParams(node("m1", "genesis", "192.168.10.11"), testImages)},
		{"worker", Params{Node: node("w1", "worker", "192.168.10.21"), Images: testImages}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, err := Files(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			for _, f := range files {
				got.WriteString("### " + f.Path + "\n")
				got.Write(f.Content)
			}
			golden.Check(t, filepath.Join("testdata", tc.name+".golden"), got.Bytes())
		})
	}
}

func TestRolesGetTheirPods(t *testing.T) {
	for _, tc := range []struct {
		role string
		want []string
	}{
		{"genesis", []string{"etcd", "kiln-node-dns", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}},
		{"master", []string{"etcd", "kiln-node-dns", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}},
		{"worker", []string{"kiln-node-dns"}},
	} {
		files, err := Files(GenesisParams(node("n", tc.role, "10.0.0.2"), testImages))
		if err != nil {
			t.Fatal(err)
		}
		var pods []string
		for _, f := range files {
			if name, ok := strings.CutPrefix(f.Path, StaticPodDir+"/"); ok {
				var pod corev1.Pod
				if err := yaml.UnmarshalStrict(f.Content, &pod); err != nil {
					t.Fatalf("%s: %v", f.Path, err)
				}
				if pod.Name+".yaml" != name || pod.Spec.Containers[0].ImagePullPolicy != corev1.PullNever {
					t.Errorf("%s: name %s, pull policy %s", f.Path, pod.Name, pod.Spec.Containers[0].ImagePullPolicy)
				}
				pods = append(pods, pod.Name)
			}
		}
		slices.Sort(pods)
		if !slices.Equal(pods, tc.want) {
			t.Errorf("%s: static pods %v, want %v", tc.role, pods, tc.want)
		}
	}
}

// Pods must not resolve through the node-local CoreDNS; the host does.
func TestPodsDoNotGetTheNodeLocalResolver(t *testing.T) {
	p := GenesisParams(node("m1", "genesis", "192.168.10.11"), testImages)
	if strings.Contains(PodResolvConfContent(p), p.Node.Cluster.NodeLocalDNS) {
		t.Error("the pods' resolv.conf names the node-local resolver")
	}
	kc := KubeletConfig(p)
	if *kc.ResolverConfig != PodResolvConf || slices.Contains(kc.ClusterDNS, p.Node.Cluster.NodeLocalDNS) {
		t.Errorf("kubelet resolvConf %s, clusterDNS %v", *kc.ResolverConfig, kc.ClusterDNS)
	}
	if !strings.Contains(Corefile(p), "bind 169.254.20.10") {
		t.Error("the node-local CoreDNS is not bound to the node-local address")
	}
}

func TestKubeletConfigIsLockedDown(t *testing.T) {
	kc := KubeletConfig(GenesisParams(node("m1", "genesis", "192.168.10.11"), testImages))
	if *kc.Authentication.Anonymous.Enabled || kc.Authorization.Mode != "Webhook" || kc.CgroupDriver != "systemd" || !kc.RotateCertificates {
		t.Errorf("kubelet config: anonymous=%v authz=%s cgroup=%s rotate=%v",
			*kc.Authentication.Anonymous.Enabled, kc.Authorization.Mode, kc.CgroupDriver, kc.RotateCertificates)
	}
	if !strings.HasPrefix(kc.StaticPodPath, "/var/lib/kiln/") {
		t.Errorf("static pod path %s is not on the state partition", kc.StaticPodPath)
	}
}

// The add-ons and containerd's configuration, byte for byte.
func TestGoldenAddOns(t *testing.T) {
	addons, err := Marshal(AddOns(GenesisParams(node("m1", "genesis", "192.168.10.11"), testImages)))
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][]byte{
		"addons.golden":          addons,
		"containerd.toml.golden": []byte(ContainerdConfig(testImages.Pause)),
	} {
		golden.Check(t, filepath.Join("testdata", name), got)
	}
}

// Every add-on resolves through the node-local CoreDNS: each reaches the
// apiservers through the discovery name, cluster DNS included (its
// forwarded names go to the site's resolvers, named in its Corefile).
func TestAddOnsGetTheNodeLocalResolver(t *testing.T) {
	specs := podSpecs(AddOns(GenesisParams(node("m1", "genesis", "192.168.10.11"), testImages)))
	if len(specs) == 0 {
		t.Fatal("no add-on pods")
	}
	for name, spec := range specs {
		local := spec.DNSPolicy == corev1.DNSNone && spec.DNSConfig != nil && slices.Equal(spec.DNSConfig.Nameservers, []string{"169.254.20.10"})
		if !local {
			t.Errorf("%s: dnsPolicy %s, %+v: not the node-local resolver alone", name, spec.DNSPolicy, spec.DNSConfig)
		}
	}
}

// The kiln image holds no kiln: every pod of it mounts the node's
// binary, read-only, where its command runs it from; no other pod does.
func TestKilnImagePodsMountTheNodesKiln(t *testing.T) {
	specs := podSpecs(AddOns(GenesisParams(node("m1", "genesis", "192.168.10.11"), testImages)))
	kilnPods := 0
	for name, spec := range specs {
		c := spec.Containers[0]
		mounted := false
		for _, m := range c.VolumeMounts {
			for _, v := range spec.Volumes {
				if v.Name == m.Name && v.HostPath != nil && v.HostPath.Path == nodefile.KilnBinary && m.MountPath == KilnInImage && m.ReadOnly {
					mounted = true
				}
			}
		}
		isKiln := c.Image == testImages.Kiln
		if isKiln {
			kilnPods++
			if c.Command[0] != KilnInImage {
				t.Errorf("%s: runs %s, want %s", name, c.Command[0], KilnInImage)
			}
		}
		if mounted != isKiln {
			t.Errorf("%s (image %s): the node's kiln mounted read-only at %s: %v", name, c.Image, KilnInImage, mounted)
		}
	}
	if kilnPods < 2 {
		t.Errorf("%d pods of the kiln image, want kiln-net and the anchors", kilnPods)
	}
}

// podSpecs are the pod templates of the DaemonSets and Deployments among
// objs, by workload name.
func podSpecs(objs []runtime.Object) map[string]corev1.PodSpec {
	specs := map[string]corev1.PodSpec{}
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.DaemonSet:
			specs[o.Name] = o.Spec.Template.Spec
		case *appsv1.Deployment:
			specs[o.Name] = o.Spec.Template.Spec
		}
	}
	return specs
}

// Every image any manifest uses is one of the images the builder bakes.
func TestReferencedImages(t *testing.T) {
	got := ReferencedImages(testImages)
	slices.Sort(got)
	want := []string{testImages.CoreDNS, testImages.Etcd, testImages.Kiln, testImages.APIServer, testImages.ControllerManager,
		testImages.Proxy, testImages.Scheduler, testImages.Pause}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("referenced images %v, want %v", got, want)
	}
}

// A node imports the images it can run, the static pods' first: the pause
// sandbox, then on a master the control plane in the order it starts,
// then the node-local DNS; then the add-ons'. A worker has no
// control-plane image, but what its node-local DNS, the DaemonSets not
// held to masters and the cluster DNS Deployment need.
func TestNodeImages(t *testing.T) {
	im := testImages
	for _, tc := range []struct {
		role       string
		boot, rest []string
	}{
		{nodefile.RoleGenesis, []string{im.Pause, im.Etcd, im.APIServer, im.ControllerManager, im.Scheduler, im.CoreDNS}, []string{im.Kiln, im.Proxy}},
		{nodefile.RoleMaster, []string{im.Pause, im.Etcd, im.APIServer, im.ControllerManager, im.Scheduler, im.CoreDNS}, []string{im.Kiln, im.Proxy}},
		{nodefile.RoleWorker, []string{im.Pause, im.CoreDNS}, []string{im.Kiln, im.Proxy}},
	} {
		got, boot := NodeImages(im, tc.role)
		if !slices.Equal(got[:boot], tc.boot) {
			t.Errorf("%s: images for the static pods %v, want %v", tc.role, got[:boot], tc.boot)
		}
		rest := slices.Sorted(slices.Values(got[boot:]))
		if !slices.Equal(rest, tc.rest) {
			t.Errorf("%s: the add-ons' images %v, want %v", tc.role, rest, tc.rest)
		}
	}
}
