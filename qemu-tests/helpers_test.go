package qemutests

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/qemu-tests/cluster"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

// bootTimeout bounds one boot under TCG on a busy 2-core machine.
const bootTimeout = 8 * time.Minute

// bootSlots holds one token per one-vCPU boot scenario running: two side
// by side on 2 host cores. go test's -parallel is higher (make qemu-test
// sets 4) so that the cluster scenario's checks, pods that wait on the
// guests' kubelets rather than on host CPU, run all at once.
var bootSlots = make(chan struct{}, 2)

// parallelBoot marks a one-vCPU boot scenario parallel and waits for a
// boot slot, which it gives back when it ends.
func parallelBoot(t *testing.T) {
	t.Parallel()
	bootSlots <- struct{}{}
	t.Cleanup(func() { <-bootSlots })
}

// outDir returns the directory holding the built image, skipping the test
// unless the QEMU suite was asked for.
func outDir(t *testing.T) string {
	t.Helper()
	if os.Getenv("KILN_QEMU") != "1" {
		t.Skip("QEMU scenarios run with KILN_QEMU=1 (make qemu-test)")
	}
	out := os.Getenv("KILN_OUT")
	for _, a := range []string{"node.iso", "node.raw", "pxe/boot.ipxe", "node.manifest.json"} {
		if _, err := os.Stat(filepath.Join(out, a)); err != nil {
			t.Fatalf("KILN_OUT=%q lacks %s: run make image first (%v)", out, a, err)
		}
	}
	return out
}

// logDir keeps a test's console logs after it ends, pass or fail.
func logDir(t *testing.T, out string) string {
	dir := filepath.Join(out, "qemu-logs", t.Name())
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startVM boots cfg and stops it when the test ends; on failure the
// console log's path and tail are in the test output.
func startVM(t *testing.T, cfg vm.Config) *vm.VM {
	t.Helper()
	cfg.KVM = vm.KVMUsable()
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = 1536
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = 2
	}
	v, err := vm.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		v.PowerCut()
		if t.Failed() {
			t.Logf("VM %s boot %d console: %s\n--- last lines ---\n%s", v.Name, v.Boot(), v.ConsolePath(v.Boot()), v.Tail(40))
		}
	})
	return v
}

// bodyEnded, deferred at the top of a scenario with cleanup reports,
// marks where a failed body ended: make's failure recap
// (qemu-tests/cmd/failure-recap, the same text) prints the lines before
// it, the failure message, not the reports after it.
func bodyEnded(t *testing.T) {
	if t.Failed() {
		t.Log("kiln-test: the test body ended failed; its cleanup reports follow")
	}
}

// waitLine fails the test unless the console shows a whole line (its
// newline written) matching re.
func waitLine(t *testing.T, v *vm.VM, re string) string {
	t.Helper()
	line, err := v.WaitWholeLine(context.Background(), regexp.MustCompile(re), bootTimeout)
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// probeFields parses "probe: a=1 b=2" into a map.
func probeFields(line string) map[string]string {
	m := map[string]string{}
	_, rest, _ := strings.Cut(line, "probe:")
	for _, f := range strings.Fields(rest) {
		if k, v, ok := strings.Cut(f, "="); ok {
			m[k] = v
		}
	}
	return m
}

func expectFields(t *testing.T, line string, want map[string]string) {
	t.Helper()
	got := probeFields(line)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("probe %s=%q, want %q (line: %s)", k, got[k], v, line)
		}
	}
}

// qemuImg runs qemu-img (create, resize).
func qemuImg(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("qemu-img", args...).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img %v: %v: %s", args, err, out)
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "--sparse=always", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp %s: %v: %s", src, err, out)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustRe(s string) *regexp.Regexp { return regexp.MustCompile(s) }

// writeSite writes a topology's site file for the kiln commands the test
// runs as the operator would.
func writeSite(t *testing.T, tp cluster.Topology) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "site.yaml")
	if err := os.WriteFile(path, []byte(tp.Site()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
