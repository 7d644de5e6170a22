package firstboot

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/<pid>/stat's times: fixed at 100 by the
// kernel's ABI on every architecture kiln builds for.
const userHZ = 100

// processTimes says, in seconds since the kernel started, when this
// process was executed and when it reached its first line: the gap
// between them is the binary's own start (paged in from the image), and
// a console line stamped later than "now" waited in the journal or on
// the console. Empty when /proc cannot be read (tests with another root).
func processTimes(root string) string {
	stat, err := os.ReadFile(filepath.Join(root, "/proc/self/stat"))
	if err != nil {
		return ""
	}
	up, err := os.ReadFile(filepath.Join(root, "/proc/uptime"))
	if err != nil {
		return ""
	}
	ticks, err := startTicks(string(stat))
	if err != nil {
		return ""
	}
	now, _, _ := strings.Cut(strings.TrimSpace(string(up)), " ")
	return fmt.Sprintf(" exec=%.2fs now=%ss", float64(ticks)/userHZ, now)
}

// startTicks reads a process's start time, in clock ticks since boot,
// from its /proc/<pid>/stat line: field 22, counted after the command
// name, which is in parentheses and may itself hold spaces and ")".
func startTicks(stat string) (uint64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in %q", stat)
	}
	fields := strings.Fields(stat[i+1:])
	// fields[0] is field 3 (state), so field 22 is fields[19].
	if len(fields) < 20 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 20", len(fields))
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// uptime is how long ago the kernel started (/proc/uptime).
func uptime(root string) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(root, "/proc/uptime"))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("/proc/uptime is empty")
	}
	s, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/uptime: %w", err)
	}
	return time.Duration(s * float64(time.Second)), nil
}
