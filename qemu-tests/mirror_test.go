package qemutests

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/builder/ociimage"
	"github.com/kiln-project/kiln/internal/certtest"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
	"github.com/kiln-project/kiln/qemu-tests/netns"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

// mirrorPort is the mirror's port at the segment's gateway address: the
// namespace is the scenario's own, so the port is free there, and known
// before the configs are rendered.
const mirrorPort = "5000"

// The probe image: a pod names it by Docker Hub's name, and the mirror
// holds it as Docker Hub would (library/...). No node has it baked, and
// the segment reaches no Docker Hub: only the mirror can serve it.
const (
	mirrorProbeImage = "docker.io/library/kiln-mirror-probe:1"
	mirrorProbeRepo  = "library/kiln-mirror-probe"
	mirrorProbeTag   = "1"
	// dockerMirrorProbe is Docker's name for it.
	dockerMirrorProbe = "kiln-mirror-probe:" + mirrorProbeTag
)

// registryMirror is the cluster scenario's site registry: the registry
// of go-containerregistry at https://<gateway>:5000 inside the segment's
// namespace, with a certificate from a CA made for the run, holding the
// probe image. The site names it as docker.io's mirror (on), so every
// node's config carries it; start serves it before any machine boots.
type registryMirror struct {
	serving *certtest.Serving
	caFile  string
	url     string
	log     lockedBuffer // the registry's log, one line per request, and the clients'
	image   v1.Hash      // the probe image's manifest digest
	config  v1.Hash      // its config's, the image's ID
	layer   v1.Hash      // and its one layer's
}

// newRegistryMirror makes the mirror's CA and certificate, and writes
// the CA where the site names it; nothing listens yet.
func newRegistryMirror(t *testing.T) *registryMirror {
	t.Helper()
	serving, err := certtest.NewServing(cluster.Gateway)
	if err != nil {
		t.Fatal(err)
	}
	m := &registryMirror{serving: serving, caFile: filepath.Join(t.TempDir(), "mirror-ca.pem"),
		url: "https://" + net.JoinHostPort(cluster.Gateway, mirrorPort)}
	if err := os.WriteFile(m.caFile, serving.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return m
}

// on is the topology with the mirror as docker.io's.
func (m *registryMirror) on(tp cluster.Topology) cluster.Topology {
	tp.Mirrors = append(slices.Clone(tp.Mirrors), cluster.Mirror{Upstream: "docker.io", URL: m.url, CAFile: m.caFile})
	return tp
}

// start serves the mirror in the run's segment until the test ends
// (its log then written beside the consoles, mirror.log), pushes the
// probe image into it through the segment, and gives the genesis
// machine's config a unit that pulls the probe image with Docker at
// boot (checkMirror reads its console line). Call it after
// newClusterRun and before the machines boot.
func (m *registryMirror) start(t *testing.T, r *clusterRun) {
	t.Helper()
	ln, err := r.seg.Listen("tcp", net.JoinHostPort(cluster.Gateway, mirrorPort))
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(registry.Logger(log.New(&m.log, "registry: ", 0)))
	srv := &http.Server{ReadHeaderTimeout: time.Minute, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		fmt.Fprintf(&m.log, "client: %s %s from %s user-agent %q\n", req.Method, req.URL, req.RemoteAddr, req.UserAgent())
		reg.ServeHTTP(w, req)
	})}
	tlsLn := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{m.serving.Cert}, MinVersion: tls.VersionTLS12})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(tlsLn) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("the registry mirror: %v", err)
		}
		path := filepath.Join(r.dir, "mirror.log")
		if err := os.WriteFile(path, []byte(m.log.String()), 0o644); err != nil {
			t.Error(err)
		}
		t.Logf("the registry mirror's log: %s", path)
	})
	m.push(t, r)
	first := r.tp.Machines[0].Name
	r.cfgs[first] = withScriptUnit(t, r.cfgs[first], "kiln-test-docker-mirror.service",
		"[Unit]\nAfter=docker.service kiln-role.service\nRequires=docker.service\n[Service]\nType=oneshot\n"+
			"ExecStart=/bin/sh /var/lib/kiln/docker-mirror-probe.sh\n[Install]\nWantedBy=multi-user.target\n",
		"/var/lib/kiln/docker-mirror-probe.sh", dockerMirrorScript)
	t.Logf("registry mirror at %s (docker.io's in the site), holding %s as %s/%s:%s", m.url, mirrorProbeImage, m.url, mirrorProbeRepo, mirrorProbeTag)
}

// dockerMirrorScript pulls the probe image by its Docker Hub name, a few
// times (Docker may still be starting), and prints the result to the
// console, with Docker's last words on failure.
const dockerMirrorScript = "#!/bin/sh\nfor i in 1 2 3 4 5 6; do\n  out=$(docker pull " + dockerMirrorProbe + " 2>&1) && break\n  sleep 10\ndone\n" +
	"if docker image inspect " + dockerMirrorProbe + " >/dev/null 2>&1; then r=ok; else r=failed; fi\n" +
	"echo \"probe: docker-mirror=$r\" > /dev/ttyS0\n[ $r = ok ] || echo \"$out\" | tail -3 > /dev/ttyS0\n"

// push builds the probe image with kiln's own image packer and writes
// it to the mirror as a client in the segment sees it: at the gateway's
// address, checked against the run's CA. The image is one small file; a
// pod of it runs the node's kiln (manifests.MountKilnBinary), as the kiln
// image's pods do.
func (m *registryMirror) push(t *testing.T, r *clusterRun) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "kiln-mirror-probe")
	if err := os.WriteFile(src, []byte("an image no kiln node has baked, pulled through the site's mirror\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := ociimage.Build(ociimage.Spec{Ref: mirrorProbeImage, Files: []ociimage.File{{Path: "/kiln-mirror-probe", Source: src, Mode: 0o644}},
		Created: time.Unix(0, 0).UTC()})
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("the probe image has %d layers, want 1", len(layers))
	}
	if m.image, err = img.Digest(); err != nil {
		t.Fatal(err)
	}
	if m.config, err = img.ConfigName(); err != nil {
		t.Fatal(err)
	}
	if m.layer, err = layers[0].Digest(); err != nil {
		t.Fatal(err)
	}
	config, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	blob, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	layer, err := io.ReadAll(blob)
	blob.Close()
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	mediaType, err := img.MediaType()
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{DialContext: r.seg.DialContext, TLSClientConfig: &tls.Config{RootCAs: m.serving.Pool(), MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	base := m.url + "/v2/" + mirrorProbeRepo
	// Each blob in one POST (the distribution spec's single-request
	// upload), then the manifest under the tag.
	for _, req := range []struct {
		method, url, contentType string
		body                     []byte
	}{
		{http.MethodPost, base + "/blobs/uploads/?digest=" + m.config.String(), "application/octet-stream", config},
		{http.MethodPost, base + "/blobs/uploads/?digest=" + m.layer.String(), "application/octet-stream", layer},
		{http.MethodPut, base + "/manifests/" + mirrorProbeTag, string(mediaType), manifest},
	} {
		hr, err := http.NewRequest(req.method, req.url, bytes.NewReader(req.body))
		if err != nil {
			t.Fatal(err)
		}
		hr.Header.Set("Content-Type", req.contentType)
		resp, err := client.Do(hr)
		if err != nil {
			t.Fatalf("pushing the probe image to the mirror: %v", err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("pushing the probe image to the mirror: %s %s: %s %s\nthe mirror's log:\n%s", req.method, req.url, resp.Status, answer, m.log.String())
		}
	}
}

// checkMirror: a pod of an image no node has baked, named by Docker Hub
// (mirrorProbeImage), runs to its end on node: containerd pulled it
// through the site's mirror, as the mirror's log shows (containerd asks a
// mirror with ns=docker.io), and the image is the one pushed there.
// Docker on the genesis machine v pulled it by its Docker Hub name too,
// from the mirror. Without config_path in the image's containerd
// configuration, containerd ignores the hosts.toml, asks Docker Hub,
// which the segment does not reach, and the pod never starts.
func checkMirror(t *testing.T, m *registryMirror, kube kubernetes.Interface, node string, v *vm.VM) {
	t.Helper()
	ctx := context.Background()
	before := m.log.Len()
	pod := clustercheck.CheckPod("mirror-check", mirrorProbeImage, node)
	c := &pod.Spec.Containers[0]
	c.ImagePullPolicy = corev1.PullAlways
	c.Command = []string{manifests.KilnInImage, "--version"}
	ended, logs, err := clustercheck.RunPod(ctx, kube, pod, 10*time.Minute, t.Logf)
	pulls := m.log.String()[before:]
	if err != nil || ended.Status.Phase != corev1.PodSucceeded || !strings.Contains(logs, "kiln version") {
		t.Fatalf("a pod of %s on %s: %v; %s; logs %q\nthe mirror's log since the pod was made:\n%s", mirrorProbeImage, node, err, containerState(ended), logs, pulls)
	}
	// containerd names the image by its digest where it has one, else by
	// its ID.
	if id := ended.Status.ContainerStatuses[0].ImageID; !strings.HasSuffix(id, "@"+m.image.String()) && id != m.config.String() {
		t.Errorf("the pod ran image %s, want the mirror's %s (ID %s)", id, m.image, m.config)
	}
	if err := m.containerdPulled(pulls); err != nil {
		t.Errorf("%v; the mirror's log since the pod was made:\n%s", err, pulls)
	}
	t.Logf("%s ran on %s, pulled through the mirror:\n%s", mirrorProbeImage, node, pulls)

	expectFields(t, waitLine(t, v, `probe: docker-mirror=`), map[string]string{"docker-mirror": "ok"})
	if err := m.dockerPulled(m.log.String()); err != nil {
		t.Errorf("Docker on %s said it pulled %s, but: %v; the mirror's log:\n%s", v.Name, dockerMirrorProbe, err, m.log.String())
	}
}

// containerdPulled says what a stretch of the mirror's log lacks of a
// pull of the probe image by containerd as docker.io's mirror, or returns
// nil: its manifest resolved (a HEAD or GET by tag, or a GET by digest:
// containerd fetches by digest only what its content store lacks) and its
// layer fetched, each with the ns=docker.io a mirror is asked with.
func (m *registryMirror) containerdPulled(log string) error {
	path := "/v2/" + mirrorProbeRepo
	for what, re := range map[string]*regexp.Regexp{
		"the manifest": regexp.MustCompile(`(?m)^registry: (GET|HEAD) ` + regexp.QuoteMeta(path+"/manifests/") +
			`(` + mirrorProbeTag + `|` + regexp.QuoteMeta(m.image.String()) + `)\?ns=docker\.io$`),
		"the layer": regexp.MustCompile(`(?m)^registry: GET ` + regexp.QuoteMeta(path+"/blobs/"+m.layer.String()) + `\?ns=docker\.io$`),
	} {
		if !re.MatchString(log) {
			return fmt.Errorf("no request for %s %s as docker.io's mirror (a line matching %s)", mirrorProbeImage, what, re)
		}
	}
	return nil
}

// dockerPulled says what the mirror's log lacks of a pull of the probe
// image by Docker (its user agent docker/...), or returns nil.
func (m *registryMirror) dockerPulled(log string) error {
	re := regexp.MustCompile(`(?m)^client: GET ` + regexp.QuoteMeta("/v2/"+mirrorProbeRepo+"/manifests/") + `\S+ from \S+ user-agent "docker/`)
	if !re.MatchString(log) {
		return fmt.Errorf("no manifest GET of Docker's (a line matching %s)", re)
	}
	return nil
}

// containerState says why a pod's container is where it is: for a pull
// that fails, the kubelet's reason (ErrImagePull, ImagePullBackOff) and
// containerd's message.
func containerState(p *corev1.Pod) string {
	if p == nil {
		return "no pod"
	}
	var out []string
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			out = append(out, fmt.Sprintf("%s waiting: %s: %s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message))
		case c.State.Terminated != nil:
			out = append(out, fmt.Sprintf("%s terminated: %s (exit %d)", c.Name, c.State.Terminated.Reason, c.State.Terminated.ExitCode))
		case c.State.Running != nil:
			out = append(out, c.Name+" running")
		}
	}
	return fmt.Sprintf("phase %s on %q; %s", p.Status.Phase, p.Spec.NodeName, strings.Join(out, "; "))
}

// lockedBuffer is a log that the registry's goroutines write and the test
// reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *lockedBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// The mirror without VMs (root only, as package netns): it serves the
// probe image in the segment with the run's CA, as containerd and Docker
// ask a mirror for it, and checkMirror's reading of its log tells their
// pulls apart and misses none.
func TestRegistryMirrorServesTheProbeInTheSegment(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("iproute2's ip is not installed")
	}
	m := newRegistryMirror(t)
	tp := m.on(cluster.TwoNodes())
	if len(tp.Mirrors) != 1 || tp.Mirrors[0].URL != "https://10.77.0.1:5000" {
		t.Fatalf("the topology's mirrors: %+v", tp.Mirrors)
	}
	cfgs, err := cluster.Configs(tp.Site(), filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	// A namespace of its own, not the cluster scenario's name.
	seg, err := netns.New(fmt.Sprintf("mr%d", os.Getpid()%100000), cluster.BridgeCIDR)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := seg.Close(); err != nil {
			t.Error(err)
		}
	})
	r := &clusterRun{tp: tp, dir: t.TempDir(), cfgs: cfgs, seg: seg}
	m.start(t, r)
	if !strings.Contains(string(r.cfgs["m1"]), "kiln-test-docker-mirror.service") || strings.Contains(string(r.cfgs["w1"]), "kiln-test-docker-mirror.service") {
		t.Error("the Docker probe is not on m1 alone")
	}

	tr := &http.Transport{DialContext: r.seg.DialContext, TLSClientConfig: &tls.Config{RootCAs: m.serving.Pool()}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	get := func(method, path, userAgent string) {
		t.Helper()
		req, err := http.NewRequest(method, m.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("User-Agent", userAgent)
		req.Header.Set("Accept", "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %s %s", method, path, resp.Status, body)
		}
	}
	repo := "/v2/" + mirrorProbeRepo
	before := m.log.Len()
	if err := m.containerdPulled(m.log.String()[before:]); err == nil {
		t.Error("a pull is found in a log without one")
	}
	// containerd's pull as docker.io's mirror, as a node's log shows it
	get(http.MethodHead, repo+"/manifests/"+mirrorProbeTag+"?ns=docker.io", "containerd/v2.2.9")
	get(http.MethodGet, repo+"/manifests/"+m.image.String()+"?ns=docker.io", "containerd/v2.2.9")
	get(http.MethodGet, repo+"/blobs/"+m.config.String()+"?ns=docker.io", "containerd/v2.2.9")
	if err := m.containerdPulled(m.log.String()[before:]); err == nil {
		t.Error("a pull without the layer passes")
	}
	if err := m.containerdPulled("registry: GET " + repo + "/blobs/" + m.layer.String() + "?ns=docker.io\n"); err == nil {
		t.Error("a layer fetched without its manifest resolved passes")
	}
	get(http.MethodGet, repo+"/blobs/"+m.layer.String()+"?ns=docker.io", "containerd/v2.2.9")
	if err := m.containerdPulled(m.log.String()[before:]); err != nil {
		t.Errorf("%v\n%s", err, m.log.String())
	}
	if err := m.dockerPulled(m.log.String()); err == nil {
		t.Error("containerd's pull passes for Docker's")
	}
	get(http.MethodGet, repo+"/manifests/"+mirrorProbeTag, "docker/20.10.24+dfsg1 go/go1.19.8 git-commit/5d6db84 os/linux arch/amd64")
	if err := m.dockerPulled(m.log.String()); err != nil {
		t.Errorf("%v\n%s", err, m.log.String())
	}
}
