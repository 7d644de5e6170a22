package vm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/kiln-project/kiln/qemu-tests/console"
)

// VM is a running (or stopped) QEMU guest.
type VM struct {
	Config
	boot    int // number of the current boot, from 1
	cmd     *exec.Cmd
	exited  chan error
	started time.Time
	rec     *console.Recorder // the current boot's console, line by line as it arrives
}

// consoleInterval is how often a boot's console is read for new lines:
// the precision of their times.
const consoleInterval = 100 * time.Millisecond

// Start boots a new VM.
func Start(cfg Config) (*VM, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	if cfg.Firmware == UEFI {
		if err := copyFile(OVMFVars, cfg.varsPath()); err != nil {
			return nil, fmt.Errorf("VM %s: NVRAM: %w", cfg.Name, err)
		}
	}
	if cfg.Direct {
		k, err := ReadISOKernel(cfg.ISO)
		if err != nil {
			return nil, fmt.Errorf("VM %s: %w", cfg.Name, err)
		}
		cfg.Kernel, cfg.Initrd, cfg.Append = k.Kernel, k.Initrd, directCmdline(k.Cmdline, cfg.KernelArgs, cfg.KVM)
	}
	v := &VM{Config: cfg}
	return v, v.start()
}

func (v *VM) start() error {
	if v.Ignition != nil {
		if err := os.WriteFile(v.ignitionPath(), v.Ignition, 0o600); err != nil {
			return err
		}
	}
	if v.Config.Boot == BootPXE && v.Firmware == BIOS {
		if err := os.WriteFile(v.serconPath(), serconPort, 0o644); err != nil {
			return err
		}
	}
	v.boot++
	os.Remove(v.ConsolePath(v.boot))
	prog, args := v.Command(v.boot)
	v.cmd = exec.Command(prog, args...)
	stderr, err := os.Create(v.stderrPath())
	if err != nil {
		return err
	}
	v.cmd.Stderr = stderr
	if err := v.cmd.Start(); err != nil {
		return fmt.Errorf("VM %s: starting QEMU: %w", v.Name, err)
	}
	v.started = time.Now()
	v.exited = make(chan error, 1)
	rec := console.Record(v.ConsolePath(v.boot), v.started, consoleInterval)
	v.rec = rec
	go func() {
		err := v.cmd.Wait()
		stderr.Close()
		rec.Stop()
		v.exited <- err
	}()
	return nil
}

// PID is QEMU's process id for the current boot (0 when powered off).
// Under Netns too: ip netns exec execs QEMU.
func (v *VM) PID() int {
	if v.cmd == nil || v.cmd.Process == nil {
		return 0
	}
	return v.cmd.Process.Pid
}

// Boot returns the number of the current boot (1 for the first).
func (v *VM) Boot() int { return v.boot }

// Uptime is the time since QEMU was started for this boot.
func (v *VM) Uptime() time.Duration { return time.Since(v.started) }

// Console returns the current boot's console so far, each line with the
// time since power-on the harness first read it.
func (v *VM) Console() []console.Line {
	if v.rec == nil {
		return nil
	}
	return v.rec.Lines()
}

// PowerCut kills QEMU at once, like pulling the plug.
func (v *VM) PowerCut() {
	if v.cmd != nil && v.cmd.Process != nil {
		v.cmd.Process.Kill()
		<-v.exited
	}
	v.cmd = nil
}

// WaitExit waits for QEMU to exit by itself: the guest rebooted or
// powered off (QEMU runs with -no-reboot). Restart powers it on again.
func (v *VM) WaitExit(timeout time.Duration) error {
	if v.cmd == nil {
		return nil
	}
	select {
	case err := <-v.exited:
		v.cmd = nil
		if err != nil {
			return fmt.Errorf("VM %s: QEMU exited: %w", v.Name, err)
		}
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("VM %s: still running after %s, want the guest to reboot", v.Name, timeout)
	}
}

// Restart powers the VM on again with the same disks and NVRAM; change
// v.Ignition first to boot with another (or no) config.
func (v *VM) Restart() error {
	v.PowerCut()
	return v.start()
}

// WaitLine waits until the current boot's console has a line matching re
// and returns it. It fails when QEMU exits or the timeout passes. The
// line may be one QEMU is still writing, such as a login prompt (which
// no newline ends).
func (v *VM) WaitLine(ctx context.Context, re *regexp.Regexp, timeout time.Duration) (string, error) {
	return v.waitLine(ctx, re, timeout, false)
}

// WaitWholeLine is WaitLine for a line a newline has ended: one whose
// fields are read (a probe line was once matched as
// "probe: boot=0aea5a84-a", every field missing).
func (v *VM) WaitWholeLine(ctx context.Context, re *regexp.Regexp, timeout time.Duration) (string, error) {
	return v.waitLine(ctx, re, timeout, true)
}

func (v *VM) waitLine(ctx context.Context, re *regexp.Regexp, timeout time.Duration, whole bool) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		if line, ok := v.find(re, whole); ok {
			return line, nil
		}
		if v.KVM && v.kvmFailed() {
			if err := v.retryUnderTCG(); err != nil {
				return "", err
			}
			continue
		}
		select {
		case err := <-v.exited:
			v.exited <- err
			return "", fmt.Errorf("VM %s: QEMU exited (%v) before the console showed %q%s", v.Name, err, re, v.stderrTail())
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("VM %s: no console line matching %q within %s", v.Name, re, timeout)
		}
	}
}

// Find returns the first line of the current boot's console matching
// re, the one QEMU is still writing included.
func (v *VM) Find(re *regexp.Regexp) (string, bool) { return v.find(re, false) }

// find is Find; whole as in lines.
func (v *VM) find(re *regexp.Regexp, whole bool) (string, bool) {
	for _, l := range v.lines(whole) {
		if re.MatchString(l) {
			return l, true
		}
	}
	return "", false
}

// Lines returns the current boot's console, line by line, with carriage
// returns and terminal escapes removed.
func (v *VM) Lines() []string { return v.lines(false) }

// lines is the current boot's console; whole leaves out a last line no
// newline has ended yet.
func (v *VM) lines(whole bool) []string {
	b, err := os.ReadFile(v.ConsolePath(v.boot))
	if err != nil {
		return nil
	}
	if whole {
		b = b[:bytes.LastIndexByte(b, '\n')+1]
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		out = append(out, console.Clean(sc.Text()))
	}
	return out
}

// Tail returns the last n console lines, for failure messages.
func (v *VM) Tail(n int) string {
	lines := v.Lines()
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// stderrPath is where the current boot's QEMU writes its stderr.
func (v *VM) stderrPath() string { return v.ConsolePath(v.boot) + ".qemu-stderr" }

// stderrTail is the last lines QEMU wrote to its stderr this boot (why
// it exited), for an error message; "" when it wrote none.
func (v *VM) stderrTail() string {
	data, _ := os.ReadFile(v.stderrPath())
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return ""
	}
	return "; QEMU's stderr: " + strings.Join(lines[max(0, len(lines)-5):], " | ")
}

var bootIDLine = regexp.MustCompile(`kiln-firstboot: start boot_id=([0-9a-f-]+)`)

// BootID returns the guest's boot id for the current boot, as the agent
// printed it.
func (v *VM) BootID(ctx context.Context, timeout time.Duration) (string, error) {
	line, err := v.WaitLine(ctx, bootIDLine, timeout)
	if err != nil {
		return "", err
	}
	return bootIDLine.FindStringSubmatch(line)[1], nil
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}

// kvmFailed reports whether QEMU stopped the guest on a KVM error, as it
// does on nested hosts whose KVM cannot emulate some boot loader code or
// set some MSR of the host CPU model.
func (v *VM) kvmFailed() bool {
	data, _ := os.ReadFile(v.stderrPath())
	for _, sign := range []string{"KVM internal error", "failed to set MSR", "kvm_buf_set_msrs"} {
		if bytes.Contains(data, []byte(sign)) {
			return true
		}
	}
	return false
}

// retryUnderTCG runs the current boot again under TCG, and makes every
// later VM skip KVM too.
func (v *VM) retryUnderTCG() error {
	fmt.Fprintf(os.Stderr, "vm %s: KVM failed (see %s); this and later VMs run under TCG\n", v.Name, v.stderrPath())
	markKVMBroken()
	v.KVM = false
	v.PowerCut()
	os.Rename(v.stderrPath(), v.ConsolePath(v.boot)+".kvm-failed")
	v.boot--
	return v.start()
}
