package qemutests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/gen/nodeconfig"
	"github.com/kiln-project/kiln/internal/browser"
	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/ops/serve"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
	"github.com/kiln-project/kiln/qemu-tests/netns"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

// The boot server's listeners, at the segment's gateway address.
const (
	servePort    = "8080"
	serveTLSPort = "8443"
)

// bootServer is the cluster scenario's network boot: the real `kiln
// serve` run inside the segment's namespace at the gateway's address,
// with every master armed, and dnsmasq beside it as the segment's DHCP
// server, giving each machine its site address and iPXE the server's
// boot.ipxe. Every machine of the scenario boots from its NIC through it.
type bootServer struct {
	seg  *netns.Net
	base string // http://gateway:8080
	log  string // kiln serve's output
	site string // the site's name
}

// startBootServer writes the site and its configs where kiln serve reads
// them (the configs as the scenario changed them), starts kiln serve and
// waits until it answers, then starts the DHCP server.
func startBootServer(t *testing.T, r *clusterRun) *bootServer {
	t.Helper()
	siteFile := writeSite(t, r.tp)
	siteDir := filepath.Join(r.dir, "site")
	if err := os.MkdirAll(filepath.Join(siteDir, nodeconfig.NodesDir), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, cfg := range r.cfgs {
		if err := os.WriteFile(filepath.Join(siteDir, nodeconfig.NodesDir, name+".ign"), cfg, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var armed []string
	for _, m := range r.tp.Masters() {
		armed = append(armed, m.Name)
	}
	b := &bootServer{seg: r.seg, base: "http://" + cluster.Gateway + ":" + servePort, log: filepath.Join(r.dir, "kiln-serve.log"), site: cluster.SiteName}
	out, err := os.Create(b.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := r.seg.Command(context.Background(), kilnBinary(t), "serve", "-f", siteFile, "--site", siteDir, "--image", r.out,
		"--pki", r.pkiDir, "--listen", cluster.Gateway+":"+servePort, "--tls-listen", cluster.Gateway+":"+serveTLSPort,
		"--tls-host", cluster.Gateway, "--arm", strings.Join(armed, ","))
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no server outlives a killed test
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting kiln serve: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); out.Close() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		t.Logf("kiln serve's log: %s", b.log)
	})
	eventually(t, "kiln serve answering on "+b.base, time.Minute, func() error {
		select {
		case err := <-exited:
			exited <- err
			log, _ := os.ReadFile(b.log)
			t.Fatalf("kiln serve exited at start: %v\n%s", err, log)
		default:
		}
		_, err := b.status(context.Background())
		return err
	})
	fixed := map[string]netip.Addr{}
	for _, m := range r.tp.Machines {
		fixed[m.MAC] = netip.MustParseAddr(m.IP())
	}
	dhcp, err := r.seg.ServeDHCP(filepath.Join(r.dir, "dhcp"), b.base+"/boot.ipxe", fixed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dhcp.Stop(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("kiln serve at %s (masters armed: %s), DHCP on the segment pointing iPXE at it", b.base, strings.Join(armed, ", "))
	return b
}

// client is an HTTP client whose connections are made inside the
// segment's namespace.
func (b *bootServer) client() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: b.seg.DialContext}}
}

// status reads /status.json.
func (b *bootServer) status(ctx context.Context) (serve.Status, error) {
	var st serve.Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+"/status.json", nil)
	if err != nil {
		return st, err
	}
	resp, err := b.client().Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET %s/status.json: %s", b.base, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// logLine is the first line of kiln serve's log matching re.
func (b *bootServer) logLine(re *regexp.Regexp) (string, bool) {
	f, err := os.Open(b.log)
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if re.MatchString(sc.Text()) {
			return sc.Text(), true
		}
	}
	return "", false
}

// waitLog waits (bounded) for a line of kiln serve's log.
func (b *bootServer) waitLog(t *testing.T, what, re string) string {
	t.Helper()
	var line string
	eventually(t, "kiln serve's log to say "+what, time.Minute, func() error {
		var ok bool
		if line, ok = b.logLine(regexp.MustCompile(re)); !ok {
			return fmt.Errorf("no line matching %q in %s", re, b.log)
		}
		return nil
	})
	return line
}

// startNetbootVM makes m's tap and a blank state disk and boots it from
// its NIC: no config is attached, it comes from kiln serve. The live
// root image is held in memory, hence the extra 512 MiB.
func startNetbootVM(t *testing.T, seg *netns.Net, dir string, m cluster.Machine) *vm.VM {
	t.Helper()
	tap, disk := machineParts(t, seg, dir, m)
	return startVM(t, vm.Config{Name: m.Name, Dir: filepath.Join(dir, m.Name), Firmware: vm.BIOS, Boot: vm.BootPXE,
		MemoryMiB: m.MemoryMiB + 512, CPUs: m.CPUs, MAC: m.MAC,
		Disks: []vm.Disk{{Path: disk, Format: "qcow2"}}, Netns: seg.Name, Tap: tap})
}

// strangerMAC is a machine the site does not name.
const strangerMAC = "52:54:00:77:00:99"

// checkStrangerRefused powers on a machine the site does not name on
// the segment: iPXE shows kiln serve's refusal on its console, the
// server logs it, and nothing boots.
func checkStrangerRefused(t *testing.T, b *bootServer, dir string) {
	t.Helper()
	m := cluster.Machine{Name: "stranger", MAC: strangerMAC, CPUs: 1, MemoryMiB: 256}
	tap := "tap-" + m.Name
	if err := b.seg.AddTap(tap); err != nil {
		t.Fatal(err)
	}
	v := startVM(t, vm.Config{Name: m.Name, Dir: filepath.Join(dir, m.Name), Firmware: vm.BIOS, Boot: vm.BootPXE,
		MemoryMiB: 256, CPUs: 1, MAC: m.MAC, Netns: b.seg.Name, Tap: tap})
	defer v.PowerCut()
	hyphens := strings.ReplaceAll(strangerMAC, ":", "-")
	line := waitLine(t, v, `kiln: no node in site `+regexp.QuoteMeta(b.site)+` has MAC `+regexp.QuoteMeta(hyphens))
	t.Logf("the stranger's console: %s (%s after power-on)", strings.TrimSpace(line), v.Uptime().Round(time.Second))
	t.Logf("kiln serve: %s", b.waitLog(t, "the stranger is unknown", `unknown machine: no node in site \S+ has MAC `+regexp.QuoteMeta(hyphens)))
	time.Sleep(10 * time.Second) // the script waits; anything it booted would print by now
	if l, ok := v.Find(regexp.MustCompile(`Linux version|kiln-firstboot`)); ok {
		t.Errorf("a machine the site does not name booted something: %q", l)
	}
}

// checkMasterConfigOnce: root on a worker (a host-network pod on from)
// asks kiln serve for m1's config, whose URL any node's /proc/cmdline
// shows: refused, as it went to m1 already, and the server says so.
func checkMasterConfigOnce(t *testing.T, b *bootServer, kube kubernetes.Interface, image, from, m1IP string) {
	t.Helper()
	st, err := b.status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if n.Secret && n.DeliveredAt == nil {
			t.Errorf("kiln serve never delivered %s's config (status: armed=%v, fetches %v)", n.Name, n.Armed, n.Fetches)
		}
	}
	url := b.base + "/config/m1.ign"
	// The pod succeeds when the answer is the refusal: a 200 (the keys
	// handed out) or no answer within the bound fails it.
	pod := clustercheck.CheckPod("steal-m1-config", image, from, "http", "--retry", "2m", "--status", "403", url)
	pod.Spec.HostNetwork = true
	ended, logs := runCheckPod(t, kube, pod)
	if ended.Status.Phase != corev1.PodSucceeded || !strings.Contains(logs, "already delivered") {
		t.Fatalf("a GET of m1's config from %s: pod %s, logs %q; want it refused (403, already delivered)", from, ended.Status.Phase, logs)
	}
	t.Logf("from %s: %s", from, strings.TrimSpace(logs))
	line := b.waitLog(t, "m1's config refused to "+from, `refused m1\.ign to \S+: already delivered at \S+ to `+regexp.QuoteMeta(m1IP))
	t.Logf("kiln serve: %s", line)
}

// checkStatusShowsPhases: /status.json lists every machine of the run
// with what it fetched and the last phase it reported, done for each.
func checkStatusShowsPhases(t *testing.T, b *bootServer, tp cluster.Topology) serve.Status {
	t.Helper()
	var st serve.Status
	eventually(t, "kiln serve's status with every machine's phase", 2*time.Minute, func() error {
		var err error
		if st, err = b.status(context.Background()); err != nil {
			return err
		}
		for _, m := range tp.Machines {
			n := nodeStatus(st, m.Name)
			switch {
			case n == nil:
				return fmt.Errorf("status lists no %s", m.Name)
			case len(n.Fetches) == 0:
				return fmt.Errorf("%s fetched nothing", m.Name)
			case n.Phase == nil || !strings.Contains(n.Phase.Phase, "done"):
				return fmt.Errorf("%s's last phase is %v, want one saying done", m.Name, n.Phase)
			}
		}
		return nil
	})
	return st
}

func nodeStatus(st serve.Status, name string) *serve.NodeStatus {
	for i := range st.Nodes {
		if st.Nodes[i].Name == name {
			return &st.Nodes[i]
		}
	}
	return nil
}

// forward serves the boot server on the host's loopback, for a browser
// that runs outside the namespace: each connection is copied to the
// server through the segment. It stops when the test ends.
func (b *bootServer) forward(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				s, err := b.seg.DialContext(ctx, "tcp", cluster.Gateway+":"+servePort)
				cancel()
				if err != nil {
					return
				}
				defer s.Close()
				go io.Copy(s, c)
				io.Copy(c, s)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// checkStatusPage: kiln serve's status lists every machine of the run
// with what it fetched and its last phase (done), and its page, read in
// a real headless browser, shows each machine's row with that phase.
func checkStatusPage(t *testing.T, b *bootServer, tp cluster.Topology) {
	t.Helper()
	st := checkStatusShowsPhases(t, b, tp)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	br, err := browser.Open(ctx)
	if err != nil {
		t.Fatalf("the status page needs a browser: %v", err)
	}
	defer br.Close()
	url := b.forward(t)
	if err := br.Load(ctx, url+"/"); err != nil {
		t.Fatal(err)
	}
	for _, m := range tp.Machines {
		n := nodeStatus(st, m.Name)
		row, err := br.WaitText(ctx, "tr#node-"+m.Name, n.Phase.Phase)
		if err != nil {
			t.Fatalf("the status page's row of %s: %v", m.Name, err)
		}
		for _, want := range []string{m.Name, m.Role, strings.ToLower(m.MAC)} {
			if !strings.Contains(row, want) {
				t.Errorf("the status page's row of %s, %q, does not show %q", m.Name, row, want)
			}
		}
		t.Logf("kiln serve's page: %s", strings.Join(strings.Fields(row), " "))
	}
}

// checkRebootsAskedNothingSecret: after the power cuts every machine
// booted through kiln serve again (an iPXE script fetched since cut),
// and none asked for a master's config: each came back from the config
// on its state disk. A refused fetch from a master's own address would
// be the false alarm an operator must never learn to ignore.
func checkRebootsAskedNothingSecret(t *testing.T, b *bootServer, tp cluster.Topology, cut time.Time) {
	t.Helper()
	st, err := b.status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range tp.Machines {
		n := nodeStatus(st, m.Name)
		if n == nil {
			t.Fatalf("kiln serve's status lists no %s", m.Name)
		}
		booted := false
		for _, f := range n.Fetches {
			if f.What == "ipxe" && f.At.After(cut) {
				booted = true
			}
			if f.Refused != "" && f.At.After(cut) {
				t.Errorf("kiln serve refused %s %s to %s at %s: %s", m.Name, f.What, f.From, f.At.Format(time.RFC3339), f.Refused)
			}
			if n.Secret && f.What == m.Name+".ign" && f.At.After(cut) {
				t.Errorf("%s asked for its config again after the power cut (at %s): it should boot from its state disk", m.Name, f.At.Format(time.RFC3339))
			}
		}
		if !booted {
			t.Errorf("%s fetched no iPXE script from kiln serve after the power cut: it did not boot through it", m.Name)
		}
	}
}
