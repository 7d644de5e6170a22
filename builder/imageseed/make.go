package imageseed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kiln-project/kiln/internal/mountinfo"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/node/catalog"
)

// MakeOptions is what Make needs: the node image's containerd and ctr
// (they run on the build host), and the images with their archives as
// paths on the build host.
type MakeOptions struct {
	Containerd, Ctr   string
	ContainerdVersion string
	Key               string // KeyFor of the same containerd and images
	Images            []catalog.Image
	Dir               string // made; must not exist
	Log               io.Writer
}

// startBound bounds containerd's start and each import; stopBound its
// exit after SIGTERM.
const (
	startBound  = time.Minute
	importBound = 10 * time.Minute
	stopBound   = 30 * time.Second
)

// Make writes a seed to o.Dir: the manifest and the store containerd
// made importing every image (unpacked with the overlayfs snapshotter,
// the layer blobs discarded once unpacked, each image pinned so the
// kubelet's image garbage collection leaves it). It needs root and an
// overlayfs-capable filesystem under o.Dir, as the build does anyway.
// On failure nothing is left at o.Dir.
func Make(ctx context.Context, o MakeOptions) (err error) {
	if _, err := os.Stat(o.Dir); err == nil {
		return fmt.Errorf("containerd seed: %s exists", o.Dir)
	}
	work, err := os.MkdirTemp(filepath.Dir(o.Dir), ".seed-work-")
	if err != nil {
		return fmt.Errorf("containerd seed: %w", err)
	}
	defer func() {
		mountinfo.UnmountUnder(work)
		os.RemoveAll(work)
	}()
	d, err := startContainerd(o.Containerd, o.Ctr, filepath.Join(work, "root"), work)
	if err != nil {
		return err
	}
	defer func() {
		if serr := d.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	if err := d.waitReady(ctx); err != nil {
		return err
	}
	for _, im := range o.Images {
		start := time.Now()
		if _, err := d.ctr(ctx, importBound, "images", "import", "--local", "--discard-unpacked-layers", "--snapshotter", "overlayfs", im.Archive); err != nil {
			return fmt.Errorf("containerd seed: importing %s: %w", im.Ref, err)
		}
		if _, err := d.ctr(ctx, startBound, "images", "label", im.Ref, "io.cri-containerd.pinned=pinned"); err != nil {
			return fmt.Errorf("containerd seed: pinning %s: %w", im.Ref, err)
		}
		if o.Log != nil {
			fmt.Fprintf(o.Log, "    seeded %s in %s\n", im.Ref, time.Since(start).Round(time.Millisecond))
		}
	}
	// Collect the discarded layers now, not whenever the scheduler would.
	if _, err := d.ctr(ctx, importBound, "content", "prune", "references"); err != nil {
		return fmt.Errorf("containerd seed: collecting the unpacked layers: %w", err)
	}
	if err := d.stop(); err != nil {
		return err
	}
	return keep(work, o)
}

// keep moves the carried parts of containerd's root into o.Dir and
// writes the manifest beside them.
func keep(work string, o MakeOptions) error {
	stage := filepath.Join(work, "seed")
	for _, part := range carried {
		src, dst := filepath.Join(work, "root", part), filepath.Join(stage, TreeDir, part)
		if err := os.MkdirAll(filepath.Dir(dst), 0o711); err != nil {
			return err
		}
		if err := os.Rename(src, dst); err != nil {
			return fmt.Errorf("containerd seed: containerd left no %s: %w", part, err)
		}
	}
	entries, err := os.ReadDir(filepath.Join(stage, TreeDir, snapshotsDir))
	if err != nil {
		return fmt.Errorf("containerd seed: %w", err)
	}
	m := Manifest{Key: o.Key, Containerd: o.ContainerdVersion}
	for _, e := range entries { // in name order
		m.Snapshots = append(m.Snapshots, e.Name())
	}
	for _, im := range o.Images {
		im.Archive = ""
		m.Images = append(m.Images, im)
	}
	data, err := m.marshal()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(stage, ManifestName), data, 0o644); err != nil {
		return err
	}
	if err := os.Rename(stage, o.Dir); err != nil {
		return fmt.Errorf("containerd seed: %w", err)
	}
	return nil
}

// daemon is the build host's containerd for one seed: its own root,
// state and socket, and none of the plugins an import does not use; and
// the ctr that talks to it.
type daemon struct {
	cmd     *exec.Cmd
	ctrPath string
	socket  string
	state   string // removed once containerd has exited
	log     *bytes.Buffer
	exited  chan struct{} // closed once containerd has exited
	waitErr error         // its exit, once exited is closed
}

const daemonConfig = `version = 3
root = %q
state = %q
disabled_plugins = [
  "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs", "io.containerd.snapshotter.v1.native",
]

[grpc]
  address = %q

[ttrpc]
  address = %q
`

// startContainerd starts containerd on the store root, with its
// configuration under work and its state and sockets in a short
// temporary directory (a socket path longer than 107 bytes cannot be
// bound, and a cache directory can be deep). stop removes it.
func startContainerd(containerd, ctr, root, work string) (*daemon, error) {
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	state, err := os.MkdirTemp("", "kiln-seed-")
	if err != nil {
		return nil, err
	}
	d := &daemon{ctrPath: ctr, socket: filepath.Join(state, "containerd.sock"), state: state, log: &bytes.Buffer{}, exited: make(chan struct{})}
	config := filepath.Join(work, "config.toml")
	text := fmt.Sprintf(daemonConfig, root, state, d.socket, filepath.Join(state, "ttrpc.sock"))
	if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
		return nil, err
	}
	d.cmd = exec.Command(containerd, "--config", config)
	d.cmd.Dir = work
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		os.RemoveAll(state)
		return nil, fmt.Errorf("containerd seed: starting %s: %w", containerd, err)
	}
	go func() {
		d.waitErr = d.cmd.Wait()
		close(d.exited)
	}()
	return d, nil
}

// ctr runs ctr against the daemon in kubelet's namespace, within bound;
// a failure carries its output.
func (d *daemon) ctr(ctx context.Context, bound time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.ctrPath, append([]string{"--address", d.socket, "--namespace", catalog.Namespace}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w\n%s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// waitReady waits, at most startBound, until containerd answers. Its
// log is read only once it has exited (it writes the buffer as it runs).
func (d *daemon) waitReady(ctx context.Context) error {
	err := catalog.WaitContainerd(ctx, d.socket, startBound, func(ctx context.Context) error {
		select {
		case <-d.exited:
			return retry.Final(errors.New("containerd exited"))
		default:
		}
		if _, err := os.Stat(d.socket); err != nil {
			return err
		}
		_, err := d.ctr(ctx, 10*time.Second, "version")
		return err
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, retry.ErrFinal):
		return fmt.Errorf("containerd seed: containerd exited (%v) before it answered:\n%s", d.waitErr, tail(d.log.String()))
	case ctx.Err() != nil:
		return ctx.Err()
	}
	serr := d.stop()
	return fmt.Errorf("containerd seed: containerd did not answer: %w (stopping it: %v):\n%s", err, serr, tail(d.log.String()))
}

// stop ends containerd with SIGTERM, SIGKILL after stopBound, and
// removes its state directory. Stopping twice is fine.
func (d *daemon) stop() error {
	defer func() {
		mountinfo.UnmountUnder(d.state)
		os.RemoveAll(d.state)
	}()
	select {
	case <-d.exited:
		return nil // already gone
	default:
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		return nil
	case <-time.After(stopBound):
		d.cmd.Process.Kill()
		<-d.exited
		return fmt.Errorf("containerd seed: containerd did not exit within %s of SIGTERM", stopBound)
	}
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return "  " + strings.Join(lines, "\n  ")
}
