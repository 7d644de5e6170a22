package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/internal/retry"

	"github.com/coreos/ignition/v2/config/v3_5/types"
)

// Target says where to create the state partition.
type Target struct {
	Disk      string // whole-disk device
	Number    int    // partition number; 0: the next free
	StartMiB  int    // 0: the start of the largest free block
	SizeMiB   int    // 0: fill the free space
	WipeTable bool   // the config allows a new partition table
}

// TargetFor decides where the state partition goes: the disk whose
// partition the config labels KILN-STATE, else the boot disk (the one
// holding KILN-ROOT-A, slot a's root). ok is false for a diskless node:
// state stays in RAM.
func (m *Manager) TargetFor(ctx context.Context, cfg types.Config) (Target, bool, error) {
	for _, d := range cfg.Storage.Disks {
		for _, p := range d.Partitions {
			if p.Label != nil && *p.Label == Label {
				t := Target{Disk: d.Device, Number: p.Number, WipeTable: d.WipeTable != nil && *d.WipeTable}
				if p.StartMiB != nil {
					t.StartMiB = *p.StartMiB
				}
				if p.SizeMiB != nil {
					t.SizeMiB = *p.SizeMiB
				}
				return t, true, nil
			}
		}
	}
	disk, err := m.bootDisk(ctx)
	if err != nil || disk == "" {
		return Target{}, false, err
	}
	return Target{Disk: disk}, true, nil
}

// bootDisk is the whole disk holding the root slots (found by slot a's
// partition), "" when the node booted from a CD or the network.
func (m *Manager) bootDisk(ctx context.Context) (string, error) {
	link := m.path("/dev/disk/by-partlabel/" + rootLabel)
	if _, err := os.Stat(link); err != nil {
		return "", nil
	}
	out, err := m.Sys.Run(ctx, "lsblk", "-ndo", "PKNAME", link)
	if err != nil {
		return "", fmt.Errorf("finding the disk of %s: %w", rootLabel, err)
	}
	name := strings.TrimSpace(string(out))
	if name == "" {
		return "", fmt.Errorf("lsblk gave no parent disk for %s", rootLabel)
	}
	return "/dev/" + name, nil
}

// Create makes the state partition on t and formats it ext4 with the
// state label and this machine's record. It refuses to touch a disk with
// an unknown partition table, a partition that already holds a
// filesystem, or a device it cannot probe.
func (m *Manager) Create(ctx context.Context, t Target) (string, error) {
	if err := m.prepareTable(ctx, t); err != nil {
		return "", err
	}
	start, end := "0", "0"
	if t.StartMiB > 0 {
		start = strconv.Itoa(t.StartMiB) + "M"
	}
	if t.SizeMiB > 0 {
		end = "+" + strconv.Itoa(t.SizeMiB) + "M"
	}
	n := strconv.Itoa(t.Number)
	m.logf("creating state partition %s on %s", Label, t.Disk)
	if _, err := m.Sys.Run(ctx, "sgdisk", "-n", n+":"+start+":"+end, "-c", n+":"+Label, "-t", n+":8300", t.Disk); err != nil {
		return "", fmt.Errorf("adding the state partition to %s: %w", t.Disk, err)
	}
	m.Sys.Run(ctx, "partx", "-u", t.Disk)
	dev, err := m.waitPartition(ctx)
	if err != nil {
		return "", err
	}
	fs, err := m.probe(ctx, dev, "TYPE")
	if err != nil {
		return "", err
	}
	if fs != "" {
		return "", fmt.Errorf("refusing to format %s: it already holds a %s filesystem", dev, fs)
	}
	args := []string{"-q", "-F", "-L", Label}
	if dir := m.recordDir(); dir != "" {
		defer os.RemoveAll(dir)
		args = append(args, "-d", dir)
	}
	if _, err := m.Sys.Run(ctx, "mkfs.ext4", append(args, dev)...); err != nil {
		return "", fmt.Errorf("formatting %s: %w", dev, err)
	}
	return dev, nil
}

// recordDir is a directory holding this machine's record and this
// kiln's layout, for mkfs to put into the new filesystem: the filesystem
// never exists without them, so a power cut before the first mount does
// not leave a state partition that only an adoption would let this
// machine use. "" when this machine cannot be identified (MountCreated
// then says why).
func (m *Manager) recordDir() string {
	this, err := m.machine().Identity()
	if err != nil || this.Empty() {
		return ""
	}
	dir, err := os.MkdirTemp("", "kiln-state-root-")
	if err != nil {
		return ""
	}
	// mkfs may give the new filesystem's root the mode of this directory
	if os.Chmod(dir, 0o755) != nil || atomicfile.WriteFile(filepath.Join(dir, RecordFile), recordOf(this), 0o644, nil) != nil ||
		m.writeLayout(dir, Layout) != nil {
		os.RemoveAll(dir)
		return ""
	}
	return dir
}

// prepareTable moves a GPT's backup header to the end of a grown disk, or
// writes a new GPT on a blank disk.
func (m *Manager) prepareTable(ctx context.Context, t Target) error {
	pt, err := m.probe(ctx, t.Disk, "PTTYPE")
	if err != nil {
		return err
	}
	switch {
	case pt == "gpt" && !t.WipeTable:
		if _, err := m.Sys.Run(ctx, "sgdisk", "-e", t.Disk); err != nil {
			return fmt.Errorf("moving the backup GPT of %s to the disk end: %w", t.Disk, err)
		}
		return nil
	case pt == "" || t.WipeTable:
		if pt == "" && !t.WipeTable {
			fs, err := m.probe(ctx, t.Disk, "TYPE")
			if err != nil {
				return err
			}
			if fs != "" {
				return fmt.Errorf("refusing to partition %s: it holds a %s filesystem and wipeTable is not set", t.Disk, fs)
			}
		}
		if _, err := m.Sys.Run(ctx, "sgdisk", "-o", t.Disk); err != nil {
			return fmt.Errorf("writing a GPT to %s: %w", t.Disk, err)
		}
		return nil
	default:
		return fmt.Errorf("refusing to partition %s: it has a %s partition table and wipeTable is not set", t.Disk, pt)
	}
}

func (m *Manager) waitPartition(ctx context.Context) (string, error) {
	link := m.path("/dev/disk/by-partlabel/" + Label)
	bound := max(m.Settle, time.Second)
	var dev string
	err := retry.WaitEvery(ctx, "the new partition "+Label, bound, 200*time.Millisecond, nil, func(context.Context) error {
		m.Sys.Run(ctx, "udevadm", "settle", "--timeout=10")
		if d, err := filepath.EvalSymlinks(link); err == nil {
			dev = m.nodePath(d)
			return nil
		}
		// without udev (containers, tests) blkid still scans the kernel's list
		out, err := m.Sys.Run(ctx, "blkid", "-o", "device", "-t", "PARTLABEL="+Label)
		if err == nil && strings.TrimSpace(string(out)) != "" {
			dev = strings.Fields(string(out))[0]
			return nil
		}
		return errNotFound
	})
	switch {
	case err == nil:
		return dev, nil
	case ctx.Err() != nil:
		return "", ctx.Err()
	}
	return "", fmt.Errorf("the new partition %s did not appear under %s within %s", Label, filepath.Dir(link), bound)
}

// blkidNothingFound is blkid's exit status when it identifies nothing:
// no signature, no such tag, no device with that label. blkid -p also
// exits 2, silently, when the device does not exist.
const blkidNothingFound = 2

// probe returns one tag (TYPE, PTTYPE) of what blkid's low-level probe
// finds on dev, "" for nothing. The agent never guesses about a disk: dev
// must read, and any blkid failure other than "nothing found" is an error,
// so a disk it cannot see into is never partitioned or formatted.
func (m *Manager) probe(ctx context.Context, dev, tag string) (string, error) {
	if err := m.readable(dev); err != nil {
		return "", fmt.Errorf("cannot tell what %s holds: %w; leaving it untouched", dev, err)
	}
	out, err := m.Sys.Run(ctx, "blkid", "-p", "-o", "value", "-s", tag, dev)
	switch {
	case err == nil:
		return strings.TrimSpace(string(out)), nil
	case exitCode(err) == blkidNothingFound && len(bytes.TrimSpace(out)) == 0:
		return "", nil
	default:
		return "", fmt.Errorf("cannot tell what %s holds: %w; leaving it untouched", dev, err)
	}
}

// readable reads the first block of dev: blkid's "nothing found" only
// means blank for a device that can be read.
func (m *Manager) readable(dev string) error {
	f, err := os.Open(m.path(dev))
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Read(make([]byte, 4096)); err != nil && err != io.EOF {
		return fmt.Errorf("reading %s: %w", dev, err)
	}
	return nil
}

// nodePath is p, a path under the root, as the node sees it.
func (m *Manager) nodePath(p string) string {
	rel, err := filepath.Rel(m.path("/"), p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return p
	}
	return "/" + rel
}

// exitCode is the exit status a command's error carries, -1 for none (the
// command did not start or was killed).
func exitCode(err error) int {
	var e interface{ ExitCode() int }
	if errors.As(err, &e) {
		return e.ExitCode()
	}
	return -1
}
