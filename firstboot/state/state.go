// Package state owns the node's persistent state partition: finding it by
// label, creating it once (on the disk the config names, or in the boot
// disk's free space), mounting it and binding the persistent paths onto
// it. It never formats a filesystem that carries the state label.
package state

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/contract/layout"
	"github.com/kiln-project/kiln/internal/command"
	"github.com/kiln-project/kiln/internal/mountinfo"
	"github.com/kiln-project/kiln/internal/retry"
)

// Names fixed by docs/architecture.md.
const (
	Label      = layout.StatePartLabel
	MountPoint = layout.StateMountPoint
)

// rootLabel names the partition whose disk is the boot disk: the root of
// slot a (contract/bootslot), which every raw disk has, whichever slot it
// booted.
var rootLabel = bootslot.A.PartLabel()

// PersistentDirs live on the state partition; everything else is rebuilt
// from the image and the config on every boot.
var PersistentDirs = []string{layout.VarDir, "/var/lib/containerd", "/var/lib/docker", "/var/lib/kubelet", "/var/lib/etcd", "/var/log"}

// Manager finds, creates and mounts the state partition.
type Manager struct {
	Root string         // "/" on a node
	Sys  command.Runner // the disk tools: udevadm, blkid, sgdisk, partx, mkfs.ext4, mount, lsblk
	Log  func(format string, args ...any)
	// Settle is how long to wait for udev to show a new partition.
	Settle time.Duration
	// FindWait bounds how long Find waits for udev before its answer
	// stands; zero means 30 s.
	FindWait time.Duration
	// Machine identifies the node; nil reads it from sysfs under Root.
	Machine Machine
	// Adopt lets Mount take a state filesystem that has no record of its
	// machine: the operator's kiln.state.adopt=1 (AdoptArg).
	Adopt bool
	// Version is this kiln's, named when it refuses a state layout it
	// does not know and recorded with the layout it writes.
	Version string
}

func (m *Manager) path(p string) string { return filepath.Join(m.Root, p) }

func (m *Manager) logf(format string, args ...any) {
	if m.Log != nil {
		m.Log(format, args...)
	}
}

// Find returns the device of an existing state filesystem, if any. A
// failed lookup is an error, not "none": the agent would go on to create
// a state partition next to the one it could not see. So are two: the
// agent does not guess which one is this machine's.
//
// blkid probes the kernel's partitions itself, so an existing state
// filesystem is found as soon as the kernel knows its disk. Until then,
// and while udev still has events queued, Find asks again whenever the
// kernel's list of block devices changes (looked at every findPoll);
// once the queue is empty (or after FindWait) it asks one last time and
// that answer stands. (After a power cut the disk's driver may still be
// loading when the agent first asks, while udev goes on with the display
// driver for half a minute: waiting for udev to settle before asking
// again would cost such a boot that half minute.)
func (m *Manager) Find(ctx context.Context) (string, bool, error) {
	changed := m.partitionsWatch()
	var dev string
	err := retry.WaitEvery(ctx, "the "+Label+" filesystem", cmp.Or(m.FindWait, defaultFindWait), findPoll, nil, func(context.Context) error {
		if changed() {
			if d, found, err := m.lookup(ctx); err == nil && found {
				dev = d
				return nil
			}
		}
		if m.udevIdle(ctx) {
			return retry.Final(errUdevIdle)
		}
		return errNotFound
	})
	switch {
	case err == nil:
		return dev, true, nil
	case ctx.Err() != nil:
		return "", false, fmt.Errorf("looking for the %s filesystem: %w", Label, ctx.Err())
	}
	return m.lookup(ctx) // udev is idle, or FindWait passed: this answer stands
}

var (
	errUdevIdle = errors.New("udev has no events queued")
	errNotFound = errors.New("not found yet")
)

const (
	defaultFindWait = 30 * time.Second
	findPoll        = 250 * time.Millisecond
)

// partitionsWatch returns a check that reports whether the kernel's
// list of block devices (/proc/partitions) changed since it last said
// so; its first call says yes. blkid probes every device, the CD-ROMs
// too, for a label it has not cached: asked four times a second on a
// blank machine it slows a one-vCPU machine's boot. Where the list cannot
// be read, every call says yes.
func (m *Manager) partitionsWatch() func() bool {
	var last []byte
	first := true
	return func() bool {
		data, err := os.ReadFile(m.path("/proc/partitions"))
		if err != nil {
			return true
		}
		if first || !bytes.Equal(data, last) {
			first, last = false, data
			return true
		}
		return false
	}
}

// udevIdle reports whether udev's event queue is empty: settle with a
// zero timeout only looks. Without udev (a container) the queue is empty.
func (m *Manager) udevIdle(ctx context.Context) bool {
	_, err := m.Sys.Run(ctx, "udevadm", "settle", "--timeout=0")
	return err == nil
}

func (m *Manager) lookup(ctx context.Context) (string, bool, error) {
	out, err := m.Sys.Run(ctx, "blkid", "-o", "device", "-t", "LABEL="+Label)
	if exitCode(err) == blkidNothingFound && len(bytes.TrimSpace(out)) == 0 {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("looking for the %s filesystem: %w", Label, err)
	}
	devs := strings.Fields(string(out))
	if len(devs) > 1 {
		return "", false, fmt.Errorf("%d filesystems are labelled %s (%s): not guessing which one is this machine's; remove or relabel all but one",
			len(devs), Label, strings.Join(devs, ", "))
	}
	return strings.Join(devs, ""), len(devs) == 1, nil
}

// Mount mounts dev, a state filesystem Find found, on MountPoint and,
// when its record names this machine, binds every persistent path onto
// a directory of the same name in it. One with no record at all is
// adopted (recorded for this machine) only when the operator asks for it
// (Adopt): a drive of unknown origin must not pass for this machine's
// just because nothing says otherwise. Another machine's, and one with
// no record that is not adopted, is unmounted again, untouched, with a
// *ForeignError; one whose layout this kiln does not know, with a
// *LayoutError. Already-mounted paths are left alone, so Mount is safe
// to repeat.
func (m *Manager) Mount(ctx context.Context, dev string) (Ownership, error) {
	return m.mount(ctx, dev, m.Adopt)
}

// MountCreated mounts the filesystem Create just made on MountPoint,
// recording it for this machine if Create could not and with this
// kiln's layout, and binds the persistent paths onto it.
func (m *Manager) MountCreated(ctx context.Context, dev string) error {
	if _, err := m.mount(ctx, dev, true); err != nil {
		return err
	}
	return m.writeLayout(m.path(MountPoint), Layout)
}

// mount mounts dev nosuid, nodev and noexec until its record is
// accepted, so that nothing on a filesystem of unknown origin can run or
// reach a device while it is looked at; then remounts it for use:
// containerd, the kubelet and their pods need set-uid files, device
// nodes and executables on the persistent paths, and each bind mount
// takes its flags from the state mount.
func (m *Manager) mount(ctx context.Context, dev string, takeUnrecorded bool) (Ownership, error) {
	mounted, err := m.mountPoints()
	if err != nil {
		return 0, err
	}
	if !mounted[MountPoint] {
		if err := os.MkdirAll(m.path(MountPoint), 0o755); err != nil {
			return 0, err
		}
		if _, err := m.Sys.Run(ctx, "mount", "-t", "ext4", "-o", inspectOptions, dev, m.path(MountPoint)); err != nil {
			return 0, fmt.Errorf("mounting %s on %s: %w", dev, MountPoint, err)
		}
	}
	// The layout first: adopting a filesystem writes its record, and one
	// of a layout this kiln does not know is not written to.
	err = m.checkLayout(dev)
	var own Ownership
	if err == nil {
		own, err = m.claim(takeUnrecorded)
	}
	var foreign *ForeignError
	if errors.As(err, &foreign) {
		foreign.Dev = dev
	}
	if errors.As(err, &foreign) || errors.As(err, new(*LayoutError)) {
		if uerr := m.unmount(ctx); uerr != nil {
			return 0, fmt.Errorf("%w; %w", err, uerr)
		}
	}
	if err != nil {
		return 0, err
	}
	if _, err := m.Sys.Run(ctx, "mount", "-o", "remount,"+useOptions, m.path(MountPoint)); err != nil {
		return 0, fmt.Errorf("remounting %s on %s for use: %w", dev, MountPoint, err)
	}
	return own, m.bind(ctx, mounted)
}

// The state filesystem's mount options while its record is read, and
// once it is accepted.
const (
	inspectOptions = "noatime,nosuid,nodev,noexec"
	useOptions     = "noatime,suid,dev,exec"
)

func (m *Manager) bind(ctx context.Context, mounted map[string]bool) error {
	for _, dir := range PersistentDirs {
		if mounted[dir] {
			continue
		}
		src := m.path(filepath.Join(MountPoint, strings.TrimPrefix(dir, "/var/")))
		if err := os.MkdirAll(src, 0o755); err != nil {
			return fmt.Errorf("state directory for %s: %w", dir, err)
		}
		if err := os.MkdirAll(m.path(dir), 0o755); err != nil {
			return err
		}
		if _, err := m.Sys.Run(ctx, "mount", "--bind", src, m.path(dir)); err != nil {
			return fmt.Errorf("binding %s: %w", dir, err)
		}
	}
	// journald keeps logs in RAM until /var/log/journal exists.
	os.MkdirAll(m.path("/var/log/journal"), 0o2755)
	m.Sys.Run(ctx, "journalctl", "--flush")
	return nil
}

// mountPoints lists what is mounted, as paths inside the root.
func (m *Manager) mountPoints() (map[string]bool, error) {
	points, err := mountinfo.Points(m.path(mountinfo.Self))
	out := map[string]bool{}
	for _, p := range points {
		out[p] = true
	}
	return out, err
}
