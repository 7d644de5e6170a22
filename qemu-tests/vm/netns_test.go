package vm

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kiln-project/kiln/qemu-tests/netns"
)

// A VM in a namespace on a tap: the process Start made is QEMU itself
// (ip netns exec execs it), QEMU holds the tap (its carrier comes up), and
// PowerCut ends it. No image needed: the guest sits in SeaBIOS.
func TestNetnsVMIsQEMUAndPowerCutEndsIt(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("qemu-system-x86_64 is not installed")
	}
	n, err := netns.New(fmt.Sprintf("v%d", os.Getpid()), "10.77.0.1/24")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := n.AddTap("kt-v"); err != nil {
		t.Fatal(err)
	}
	v, err := Start(Config{Name: "netns", Dir: t.TempDir(), Boot: BootDisk, Netns: n.Name, Tap: "kt-v", MAC: "52:54:00:77:00:99"})
	if err != nil {
		t.Fatal(err)
	}
	defer v.PowerCut()
	pid := v.PID()
	deadline := time.Now().Add(20 * time.Second)
	for {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		link, _ := n.Link("kt-v")
		if strings.HasPrefix(string(comm), "qemu-system") && strings.Contains(link, "LOWER_UP") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 20 s: pid %d is %q, tap kt-v: %s\nQEMU stderr: %s", pid, comm, link, readFile(v.ConsolePath(1)+".qemu-stderr"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	v.PowerCut()
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("QEMU (pid %d) still runs after PowerCut", pid)
	}
}

func readFile(p string) string {
	data, _ := os.ReadFile(p)
	return string(data)
}
