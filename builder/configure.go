package builder

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// file is one file written into the root filesystem.
type file struct {
	path string // absolute, inside the image
	data string
	mode os.FileMode
}

func writeFiles(rootfs string, files []file) error {
	for _, f := range files {
		p := filepath.Join(rootfs, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("writing %s: %w", f.path, err)
		}
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			return fmt.Errorf("writing %s: %w", f.path, err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			return fmt.Errorf("writing %s: %w", f.path, err)
		}
	}
	return nil
}

// nodeFiles is the node configuration every kiln image carries. The agent
// and the node's Ignition config add to it at boot.
func nodeFiles() []file {
	return append([]file{
		{path: "/etc/machine-id", mode: 0o444}, // empty: systemd makes one per boot
		{path: "/etc/fstab", data: "# kiln: the root is a read-only squashfs under a tmpfs overlay; the agent mounts the state partition\n", mode: 0o644},
		{path: "/etc/systemd/network/90-kiln-dhcp.network", mode: 0o644,
			data: "# kiln default: DHCP on every wired NIC. A node's Ignition config may add lower-numbered files.\n[Match]\nName=en* eth*\n\n[Network]\nDHCP=yes\n"},
		{path: "/etc/sysctl.d/90-kiln.conf", mode: 0o644,
			data: "# The kubelet with protectKernelDefaults refuses to start without these.\nvm.overcommit_memory = 1\nkernel.panic = 10\nkernel.panic_on_oops = 1\n" +
				"net.ipv4.ip_forward = 1\n" +
				"# Pod traffic through the CNI bridge must pass kube-proxy's rules (br_netfilter is loaded first).\n" +
				"net.bridge.bridge-nf-call-iptables = 1\nnet.bridge.bridge-nf-call-ip6tables = 1\n"},
		{path: "/etc/modules-load.d/kiln.conf", mode: 0o644, data: "overlay\nbr_netfilter\nqemu_fw_cfg\n"},
		{path: sshHostKeysDropIn, mode: 0o644, data: sshHostKeysConf},
		{path: "/etc/systemd/journald.conf.d/kiln.conf", mode: 0o644, data: "[Journal]\nStorage=auto\nForwardToConsole=no\n"},
	}, dracutFiles()...)
}

// dracutFiles are dracut's configuration and kiln's own dracut module.
// They go in before apt installs the kernel too: its postinst runs dracut
// with this configuration, which fails on a module it cannot find.
func dracutFiles() []file {
	return []file{
		{path: "/etc/dracut.conf.d/kiln.conf", mode: 0o644, data: dracutConf},
		{path: rootfsCheckDir + "/module-setup.sh", mode: 0o755, data: rootfsCheckSetup},
		{path: rootfsCheckDir + "/kiln-rootfs-verify.sh", mode: 0o755, data: rootfsCheckHook},
	}
}

// The dracut module kiln-rootfs checks the live root image against
// kiln.rootfs.hash= on the kernel command line before the switch to it
// (kiln serve passes the digest of the image it serves): a root image
// swapped on the network never runs. Without the argument it does
// nothing.
const rootfsCheckDir = "/usr/lib/dracut/modules.d/90kiln-rootfs"

var (
	//go:embed dracut/90kiln-rootfs/module-setup.sh
	rootfsCheckSetup string
	//go:embed dracut/90kiln-rootfs/kiln-rootfs-verify.sh
	rootfsCheckHook string
)

// nodeFilesDigest identifies nodeFiles' content: part of the initramfs
// cache's recipe, since dracut may read these files without copying them.
func nodeFilesDigest() string {
	h := sha256.New()
	for _, f := range nodeFiles() {
		fmt.Fprintf(h, "%s %o %d\n%s", f.path, f.mode, len(f.data), f.data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// sshHostKeysDropIn makes sshd take the node's host keys from the state
// partition (made on the node once, never baked into the image): after
// the agent has mounted it, kiln firstboot host-keys replaces Debian's
// ssh-keygen -A, which made new ones in /etc/ssh on every boot.
const (
	sshHostKeysDropIn = "/etc/systemd/system/ssh.service.d/kiln-host-keys.conf"
	sshHostKeysConf   = "# kiln: host keys are made once and kept on the state partition (docs/security.md)\n" +
		"[Unit]\nAfter=kiln-firstboot.service\n\n" +
		"[Service]\nExecStartPre=\nExecStartPre=/usr/bin/kiln firstboot host-keys\nExecStartPre=/usr/sbin/sshd -t\n"
)

// dracutConf builds one initramfs that finds the root on a CD, a disk
// partition or the network, and overlays it with tmpfs. The initramfs
// mounts only iso9660, squashfs, ext4, vfat and overlay: the other
// filesystems' modules stay in the root filesystem, for the node. dracut
// writes it uncompressed; the builder compresses it (compressInitramfs).
const dracutConf = `# kiln: one initramfs for every boot path (CD, disk partition, PXE)
hostonly="no"
reproducible="yes"
add_dracutmodules+=" dmsquash-live livenet network-legacy url-lib kiln-rootfs "
omit_dracutmodules+=" plymouth btrfs mdraid lvm multipath iscsi nfs crypt dmraid resume "
omit_drivers+=" xfs btrfs ocfs2.* cifs smb.* f2fs ceph gfs2 kafs ubifs dlm nilfs2 reiserfs jfs jffs2 cachefiles "
add_drivers+=" squashfs overlay loop isofs sr_mod cdrom virtio_blk virtio_scsi virtio_net virtio_pci virtio_console ahci ata_piix e1000 e1000e qemu_fw_cfg ext4 vfat nls_cp437 nls_iso8859_1 "
`

// unitsEnabled, unitsDisabled and unitsMasked shape what runs on an
// immutable node. Docker starts on its first use, through its socket:
// the kubelet talks to containerd, and an idle dockerd started at boot
// took CPU from the first boot's image import and control plane.
// (docker.service is disabled before docker.socket is enabled: its
// [Install] section names the socket with Also=.)
var (
	unitsDisabled = []string{"docker.service"}
	unitsEnabled  = []string{"systemd-networkd.service", "systemd-timesyncd.service", "containerd.service", "docker.socket"}
	unitsMasked   = []string{"apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_reap.service"}
)

// configureNode turns the installed base into a kiln node: no baked host
// identity (machine id, SSH host keys, hostname: the build host's leaks in
// through debootstrap), networkd with DHCP, the sysctls the kubelet needs, and nothing
// left over from the build chroot. Nor /var/log/journal: with it in the
// image, journald writes its persistent journal into the root's RAM
// overlay from early boot and keeps those files open after the agent
// binds the state partition's log directory over /var/log, so no boot's
// journal was ever kept; without it journald holds the boot's log in
// /run until the agent makes the directory on the state partition and
// asks for a flush.
func (b *build) configureNode(ctx context.Context) error {
	for _, glob := range []string{"/etc/ssh/ssh_host_*", "/boot/initrd.img-*", "/initrd.img*", "/var/lib/dbus/machine-id", "/usr/sbin/policy-rc.d", "/etc/hostname", "/var/log/journal"} {
		if err := removeGlob(b.rootfs, glob); err != nil {
			return err
		}
	}
	if err := writeFiles(b.rootfs, nodeFiles()); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(b.rootfs, "var/lib/kiln-state"), 0o755); err != nil {
		return err
	}
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if err := b.chroot(ctx, env, "systemctl", append([]string{"disable", "--quiet"}, unitsDisabled...)...); err != nil {
		return err
	}
	if err := b.chroot(ctx, env, "systemctl", append([]string{"enable", "--quiet"}, unitsEnabled...)...); err != nil {
		return err
	}
	return b.chroot(ctx, env, "systemctl", append([]string{"mask", "--quiet"}, unitsMasked...)...)
}

func removeGlob(rootfs, glob string) error {
	matches, err := filepath.Glob(filepath.Join(rootfs, glob))
	if err != nil {
		return err
	}
	for _, m := range matches {
		if err := os.RemoveAll(m); err != nil {
			return fmt.Errorf("removing %s: %w", strings.TrimPrefix(m, rootfs), err)
		}
	}
	return nil
}
