package qemutests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/contract/imagemanifest"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
	"github.com/kiln-project/kiln/qemu-tests/netns"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

// TestUpgradeRollsForwardAndBack: a genesis node on a raw disk (UEFI,
// root slots a and b) is rolled by the real kiln upgrade onto v2 (the same
// image with another kiln: make upgrade-images), keeping what the cluster
// wrote; then onto v3, whose trying boot fails its health gate on purpose
// and comes back on v2 by itself, the rollout stopping with the node's
// reason; then onto v3 again with the power cut during its trying boot,
// which also comes back on v2.
//
// About an hour under TCG, beyond CI's budget: it runs with
// KILN_UPGRADE=1 (make upgrade-test, make soak). make test's raw-disk
// scenario tries a slot that panics and comes back under real firmware.
func TestUpgradeRollsForwardAndBack(t *testing.T) {
	if os.Getenv("KILN_UPGRADE") != "1" {
		t.Skip("the upgrade scenario runs with KILN_UPGRADE=1 (make upgrade-test, make soak)")
	}
	parallelBoot(t)
	defer bodyEnded(t)
	out := outDir(t)
	v2, v3 := upgradeBuild(t, out, "v2"), upgradeBuild(t, out, "v3")
	dir := logDir(t, out)
	seg := segment(t)
	tl := newBootTimeline(t, dir, "upgrade")
	g := newSiteGen(t, seg)
	cfg := g.gen(t, sshKey(t, g.dir, "a"), "10.77.0.1", "")
	ctx := context.Background()

	disk := filepath.Join(dir, "m1.raw")
	copyFile(t, filepath.Join(out, "node.raw"), disk)
	qemuImg(t, "resize", "-q", "-f", "raw", disk, "8G")
	tap := "tap-m1"
	if err := seg.AddTap(tap); err != nil {
		t.Fatal(err)
	}
	m1 := &clusterVM{Machine: g.m1}
	m1.VM = startVM(t, vm.Config{Name: "m1", Dir: filepath.Join(dir, "m1"), Firmware: vm.UEFI, Boot: vm.BootDisk,
		MemoryMiB: g.m1.MemoryMiB, CPUs: g.m1.CPUs, MAC: g.m1.MAC, Disks: []vm.Disk{{Path: disk, Format: "raw"}},
		Netns: seg.Name, Tap: tap, Ignition: cfg})
	waitLine(t, m1.VM, `kiln-firstboot: slot a: booted the active slot`)
	waitDone(t, tl, m1, "bootstrapped")
	kube := g.client(t)
	eventually(t, "node m1 Ready", clusterSettle, func() error { return clustercheck.NodeReady(ctx, kube, "m1", time.Time{}) })
	createConfigMap(t, kube, "before-upgrade")

	// 1. v1 to v2: staged into slot b, tried, marked good.
	up := startUpgrade(t, seg, g, v2)
	rebootOnto(t, m1, "b")
	t.Logf("m1: %s", waitLine(t, m1.VM, `kiln-firstboot: kiln: slot b \(\S+\) passed the health gate and is now the active slot`))
	if err := up.wait(); err != nil {
		t.Fatalf("kiln upgrade to v2: %v\n%s", err, up.out())
	}
	up.expect(t, "every node of the site runs kiln sha256:")
	onBuild(t, kube, v2)
	if _, err := kube.CoreV1().ConfigMaps("default").Get(ctx, "before-upgrade", metav1.GetOptions{}); err != nil {
		t.Errorf("the ConfigMap written before the upgrade: %v", err)
	}

	// 2. v2 to v3, whose gate fails: back on v2 by itself.
	up = startUpgrade(t, seg, g, v3)
	rebootOnto(t, m1, "a")
	t.Logf("m1: %s", waitLine(t, m1.VM, `kiln: the trying boot of slot a failed \(health gate: test switch`))
	if err := m1.WaitExit(3 * time.Minute); err != nil {
		t.Fatal(err)
	}
	restart(t, m1)
	t.Logf("m1: %s", waitLine(t, m1.VM, `kiln: rolled back from a to b: health gate: test switch`))
	if err := up.wait(); err == nil || !strings.Contains(up.out(), "kiln: rolled back from a to b: health gate") {
		t.Errorf("kiln upgrade to v3: %v, want it stopped by m1's rollback\n%s", err, up.out())
	}
	waitDone(t, tl, m1, "restored")
	onBuild(t, kube, v2)

	// 3. v3 again, the power cut during its trying boot: back on v2.
	up = startUpgrade(t, seg, g, v3)
	rebootOnto(t, m1, "a")
	m1.PowerCut()
	restart(t, m1)
	t.Logf("m1: %s", waitLine(t, m1.VM, `kiln: rolled back from a to b: its trying boot ended before it was marked good`))
	if err := up.wait(); err == nil || !strings.Contains(up.out(), "kiln: rolled back from a to b") {
		t.Errorf("kiln upgrade to v3 cut short: %v, want it stopped by m1's rollback\n%s", err, up.out())
	}
	waitDone(t, tl, m1, "restored")
	onBuild(t, kube, v2)
	if _, err := kube.CoreV1().ConfigMaps("default").Get(ctx, "before-upgrade", metav1.GetOptions{}); err != nil {
		t.Errorf("the ConfigMap written before the upgrades: %v", err)
	}
}

// upgradeBuild is make upgrade-images' build name beside out.
func upgradeBuild(t *testing.T, out, name string) *imagemanifest.Build {
	t.Helper()
	dir := out + "-upgrade-" + name
	b, err := imagemanifest.Open(dir)
	if err != nil {
		t.Fatalf("the upgrade scenario's build %s: %v (make upgrade-images builds it)", name, err)
	}
	return b
}

// rebootOnto waits for the node to stage a build into slot and reboot,
// then powers it on again and waits for the trying boot of slot.
func rebootOnto(t *testing.T, n *clusterVM, slot string) {
	t.Helper()
	t.Logf("%s: %s", n.Name, waitLine(t, n.VM, `upgrade: request \S+: staged \S+ on slot `+slot+` in`))
	waitLine(t, n.VM, `upgrade: request \S+: rebooting to try slot `+slot+` once`)
	if err := n.WaitExit(3 * time.Minute); err != nil {
		t.Fatal(err)
	}
	restart(t, n)
	waitLine(t, n.VM, `kiln-firstboot: slot `+slot+`: trying its image once`)
}

func restart(t *testing.T, n *clusterVM) {
	t.Helper()
	if err := n.Restart(); err != nil {
		t.Fatal(err)
	}
}

// onBuild: the Node runs b's kiln and is Ready.
func onBuild(t *testing.T, kube kubernetes.Interface, b *imagemanifest.Build) {
	t.Helper()
	eventually(t, "m1 Ready on kiln sha256:"+b.Versions.KilnSHA256[:12], clusterSettle, func() error {
		n, err := kube.CoreV1().Nodes().Get(context.Background(), "m1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := n.Annotations[nodefile.KilnDigestAnnotation]; got != b.Versions.KilnSHA256 {
			return fmt.Errorf("m1 runs kiln sha256:%.12s", got)
		}
		return clustercheck.NodeReady(context.Background(), kube, "m1", time.Time{})
	})
}

// upgrade is a kiln upgrade running inside the segment.
type upgrade struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	done chan error
}

func (u *upgrade) Write(p []byte) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.buf.Write(p)
}

func (u *upgrade) out() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.buf.String()
}

func (u *upgrade) wait() error {
	select {
	case err := <-u.done:
		return err
	case <-time.After(20 * time.Minute):
		return fmt.Errorf("kiln upgrade still running after 20 minutes")
	}
}

func (u *upgrade) expect(t *testing.T, s string) {
	t.Helper()
	if !strings.Contains(u.out(), s) {
		t.Errorf("kiln upgrade's output lacks %q:\n%s", s, u.out())
	}
}

// startUpgrade runs kiln upgrade onto b, serving its artifacts on the
// segment's gateway; the node's one master is rolled with its outage
// accepted.
func startUpgrade(t *testing.T, seg *netns.Net, g *siteGen, b *imagemanifest.Build) *upgrade {
	t.Helper()
	u := &upgrade{done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := seg.Command(ctx, kilnBinary(t), "upgrade", "-f", g.site, "--pki", g.pki, "--image", b.Dir,
		"--serve", cluster.Gateway+":0", "--accept-outage")
	cmd.Stdout, cmd.Stderr = u, u
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { u.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		t.Logf("kiln upgrade onto %s:\n%s", filepath.Base(b.Dir), u.out())
	})
	return u
}
