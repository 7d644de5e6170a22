// Package bootrecord is a disk node's side of contract/bootslot: it
// mounts the ESP, reads the boot-state record GRUB left and writes the
// agent's transitions back in place, installs a staged slot's kernel and
// initrd, and turns a boot into its verdict: what this boot is
// (Conclude), and for a trying boot, marked good after the health gate
// or failed and rebooted onto the active slot (Trial).
package bootrecord

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/contract/layout"
	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/internal/command"
	"github.com/kiln-project/kiln/internal/mountinfo"
	"github.com/kiln-project/kiln/internal/retry"
	"golang.org/x/sys/unix"
)

// espWait bounds the wait for udev to show the ESP.
const espWait = 2 * time.Minute

// ESPPartLabel is the GPT label of the ESP the builder writes.
const ESPPartLabel = "KILN-ESP"

// MountPoint is where the agent mounts the ESP, for this boot only.
const MountPoint = layout.RunDir + "/esp"

// ErrNoSlots is returned for a boot whose command line names no slot: an
// ISO or PXE boot, or a disk written before the slots existed.
var ErrNoSlots = errors.New("this boot names no root slot (" + bootslot.SlotArg + "=): it is not an A/B disk boot")

// Mount mounts the ESP at MountPoint under root, unless it is mounted
// there already, and returns the Store on it.
func Mount(ctx context.Context, root string, sys command.Runner) (Store, error) {
	dir := filepath.Join(root, MountPoint)
	points, err := mountinfo.Points(filepath.Join(root, mountinfo.Self))
	if err != nil {
		return Store{}, err
	}
	for _, p := range points {
		if p == MountPoint {
			return Store{Dir: dir}, nil
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Store{}, err
	}
	dev := filepath.Join(root, "/dev/disk/by-partlabel", ESPPartLabel)
	// Early in the boot udev may not have made the link yet.
	err = retry.WaitEvery(ctx, "the ESP's device "+dev, espWait, time.Second, nil, func(context.Context) error {
		_, err := os.Stat(dev)
		return err
	})
	if err != nil {
		return Store{}, err
	}
	if _, err := sys.Run(ctx, "mount", "-t", "vfat", "-o", "rw,nosuid,nodev,noexec,umask=0077", dev, dir); err != nil {
		return Store{}, fmt.Errorf("mounting the ESP (%s) at %s: %w", dev, MountPoint, err)
	}
	return Store{Dir: dir}, nil
}

// Store is the boot-state record and the slots' boot files on a mounted
// ESP.
type Store struct{ Dir string }

func (s Store) envPath() string { return filepath.Join(s.Dir, filepath.FromSlash(bootslot.EnvPath)) }

// Read decodes the record.
func (s Store) Read() (bootslot.Record, error) {
	b, err := os.ReadFile(s.envPath())
	if err != nil {
		return bootslot.Record{}, fmt.Errorf("reading the boot-state record: %w", err)
	}
	r, err := bootslot.Decode(b)
	if err != nil {
		return bootslot.Record{}, fmt.Errorf("the boot-state record %s on the ESP: %w", bootslot.EnvPath, err)
	}
	return r, nil
}

// Write encodes r over the record, in place and synced. GRUB's save_env
// writes the file's own blocks and never creates one, so the record is
// never replaced by a new file: contract/bootslot keeps what GRUB reads
// in the block's first sector, so a torn write shows old or new values.
func (s Store) Write(r bootslot.Record) error {
	b, err := bootslot.Encode(r)
	if err != nil {
		return fmt.Errorf("encoding the boot-state record (%s): %w", r.State(), err)
	}
	f, err := os.OpenFile(s.envPath(), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("writing the boot-state record: %w", err)
	}
	fi, err := f.Stat()
	if err == nil && fi.Size() != int64(len(b)) {
		err = fmt.Errorf("it is %d bytes, not the %d of a GRUB environment block: not rewriting it", fi.Size(), len(b))
	}
	if err == nil {
		_, err = f.WriteAt(b, 0)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing the boot-state record %s: %w", bootslot.EnvPath, err)
	}
	return nil
}

// Update applies change to the record under an exclusive lock (the agent
// and the boot deadline both judge a trying boot), and writes what it
// returns unless that is the record unchanged.
func (s Store) Update(change func(bootslot.Record) (bootslot.Record, error)) (bootslot.Record, error) {
	lock, err := os.OpenFile(filepath.Join(s.Dir, filepath.FromSlash(bootslot.EnvPath)), os.O_RDONLY, 0)
	if err != nil {
		return bootslot.Record{}, fmt.Errorf("locking the boot-state record: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return bootslot.Record{}, fmt.Errorf("locking the boot-state record: %w", err)
	}
	r, err := s.Read()
	if err != nil {
		return r, err
	}
	next, err := change(r)
	if err != nil || next == r {
		return next, err
	}
	return next, s.Write(next)
}

// Install writes src to the ESP at name (an absolute ESP path such as
// bootslot.B.Kernel()) through a synced temporary file and a rename, and
// returns the hex SHA-256 of what it wrote.
func (s Store) Install(name string, src io.Reader) (string, error) {
	if err := check(name); err != nil {
		return "", err
	}
	dst := filepath.Join(s.Dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return "", err
	}
	tmp := dst + ".new"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return "", fmt.Errorf("installing %s on the ESP: %w", name, err)
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), src)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err == nil {
		err = atomicfile.SyncDir(filepath.Dir(dst))
	}
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("installing %s on the ESP: %w", name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Booted is the slot this boot's command line names, or ErrNoSlots.
func Booted(root string) (bootslot.Slot, error) {
	b, err := os.ReadFile(filepath.Join(root, "/proc/cmdline"))
	if err != nil {
		return "", err
	}
	if !strings.Contains(string(b), bootslot.SlotArg+"=") {
		return "", ErrNoSlots
	}
	return bootslot.BootedSlot(string(b))
}

// check keeps name an absolute ESP path under /kiln.
func check(name string) error {
	if path.Clean(name) != name || !strings.HasPrefix(name, "/kiln/") {
		return fmt.Errorf("%q is not a path under /kiln on the ESP", name)
	}
	return nil
}
