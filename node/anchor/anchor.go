// Package anchor keeps the control-plane components anchored on a master:
// the masters' anchor pod (kiln anchor --component <name>..., one pod for
// all of them) renders each component's static pod from the node file
// and the image's catalog and keeps it in the kubelet's static pod
// directory on the state partition,
// so the kubelet runs it even when no apiserver answers. Its cleanup (the
// pod's preStop hook, run only when the pod is deleted through the API,
// never on a power cut) is bounded in time and moves the manifest to a
// backup directory instead of deleting it.
//
// The discovery anchor keeps the node-local CoreDNS zone current from the
// kubernetes Endpoints: only ready apiservers are listed there, so an
// unhealthy one drops out of the answer.
package anchor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kiln-project/kiln/contract/discovery"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/catalog"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// Components are the anchored control-plane components, and Discovery
// the zone anchor.
var Components = manifests.AnchoredComponents

const Discovery = manifests.DiscoveryAnchor

// BackupDir is where cleanup moves an anchored manifest.
const BackupDir = manifests.AnchorBackupDir

// Host is the anchored node's filesystem, seen from the anchor's pod.
type Host struct {
	Root string // where the host paths are mounted ("" or "/" in the pod)
	Log  func(format string, args ...any)
}

func (h Host) path(p string) string { return filepath.Join(h.Root, p) }

// Render returns the files that keep the component running on this
// node: its static pod and, for etcd, its configuration file.
func (h Host) Render(component string) ([]manifests.File, error) {
	f, err := nodefile.Read(h.path(nodefile.Path))
	if err != nil {
		return nil, err
	}
	cat, err := catalog.Read(h.path(catalog.Path))
	if err != nil {
		return nil, err
	}
	// etcd is rendered from the membership the role recorded when the
	// member was created (never a new cluster once bootstrapped); the
	// other components do not depend on it.
	rec, err := etcdmember.Read(h.Root)
	if err != nil && component == "etcd" {
		return nil, fmt.Errorf("etcd: %w (the role records it when this master's member is created)", err)
	}
	return manifests.ComponentFiles(manifests.ForNode(*f, cat.Manifests(), rec), component)
}

// Keep writes each of the component's files that differs from what is
// on the host, atomically. It reports whether it wrote any.
func (h Host) Keep(component string) (bool, error) {
	files, err := h.Render(component)
	if err != nil {
		return false, err
	}
	wrote := false
	for _, f := range files {
		p := h.path(f.Path)
		if have, err := os.ReadFile(p); err == nil && bytes.Equal(have, f.Content) {
			continue
		}
		if err := atomicfile.WriteFile(p, f.Content, 0o644, nil); err != nil {
			return wrote, err
		}
		wrote = true
	}
	return wrote, nil
}

// Cleanup is the anchor pod's preStop: it moves the component's manifest
// to the backup directory (Backup), so the kubelet stops the component.
// etcd's only once this master's member has left the cluster
// (manifests.EtcdMemberRemovedMarker, which the host's kiln-leave writes
// after removing it; waited for until ctx ends): a member stopped while
// still a voter counts against the quorum, and with two masters takes
// the cluster down. Without the marker etcd keeps running and kiln-leave
// moves its manifest after the removal.
func (h Host) Cleanup(ctx context.Context, component string, now time.Time) error {
	if component == "etcd" && !h.waitMemberRemoved(ctx) {
		h.log("etcd: this master's member has not left the cluster (no %s): etcd's manifest stays; "+
			"kiln-leave on the host removes the member when the Node loses its master label, then moves it", manifests.EtcdMemberRemovedMarker)
		return nil
	}
	return h.Backup(ctx, component, now)
}

// waitMemberRemoved reports whether kiln-leave has recorded the removal of
// this master's etcd member, waiting for it until ctx ends.
func (h Host) waitMemberRemoved(ctx context.Context) bool {
	marker := h.path(manifests.EtcdMemberRemovedMarker)
	err := retry.WaitEvery(ctx, "this master's etcd member's removal ("+marker+")", retry.NoBound, time.Second, nil, func(context.Context) error {
		_, err := os.Stat(marker)
		return err
	})
	return err == nil
}

func (h Host) log(format string, args ...any) {
	if h.Log != nil {
		h.Log(format, args...)
	}
}

// Backup moves the component's manifest to the backup directory, so the
// kubelet stops the component and the file can be restored by hand. A
// manifest already gone is done.
func (h Host) Backup(ctx context.Context, component string, now time.Time) error {
	src := h.path(filepath.Join(manifests.StaticPodDir, component+".yaml"))
	if _, err := os.Stat(src); os.IsNotExist(err) {
		return nil
	}
	dst := h.path(filepath.Join(BackupDir, fmt.Sprintf("%s.yaml.%s", component, now.UTC().Format("20060102T150405Z"))))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- move(src, dst) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("cleanup of %s: %w", component, ctx.Err())
	}
}

// move renames src to dst. The anchor's pod mounts the static pod
// directory and the backup directory apart, and rename(2) refuses to
// cross mounts (EXDEV): then the manifest is copied to dst, made
// durable, and only then removed, so it is never in neither place.
func move(src, dst string) error {
	err := os.Rename(src, dst)
	if errors.Is(err, syscall.EXDEV) {
		err = copyThenRemove(src, dst)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil // moved by the other of the pod's preStop and kiln-leave
	}
	if err != nil {
		return err
	}
	if err := atomicfile.SyncDir(filepath.Dir(dst)); err != nil {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(src))
}

func copyThenRemove(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(dst, data, 0o644, nil); err != nil {
		return fmt.Errorf("backing up %s: %w", src, err)
	}
	return os.Remove(src)
}

// ZoneFrom returns the discovery zone listing the ready addresses of the
// kubernetes Endpoints; ok is false when there are none (the zone on
// disk is then kept: an empty answer would cut every node off).
func ZoneFrom(ep *corev1.Endpoints, name string, serial uint32) (discovery.Zone, bool) {
	z := discovery.Zone{Name: name, Serial: serial}
	for _, s := range ep.Subsets {
		for _, a := range s.Addresses {
			if ip, err := netip.ParseAddr(a.IP); err == nil && !slices.Contains(z.APIServers, ip) {
				z.APIServers = append(z.APIServers, ip)
			}
		}
	}
	return z, len(z.APIServers) > 0
}

// KeepZone writes the zone when its records differ from the live zone's.
func (h Host) KeepZone(z discovery.Zone) (bool, error) {
	p := h.path(manifests.ZoneFile)
	if have, err := os.ReadFile(p); err == nil {
		if bytes.Equal(withoutSOA(have), withoutSOA(z.Render())) {
			return false, nil
		}
	}
	return true, atomicfile.WriteFile(p, z.Render(), 0o644, nil)
}

// withoutSOA drops the SOA line, whose serial changes on every render.
func withoutSOA(zone []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(zone, []byte("\n")) {
		if !bytes.Contains(l, []byte("\tSOA\t")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}
