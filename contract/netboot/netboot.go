// Package netboot is what the network boot path agrees on: the builder
// writes it (out/pxe/ and the manifest's artifact digests), kiln serve
// serves it, and the node's initramfs and agent read the kernel arguments
// it names. It owns the PXE artifact names, the manifest's file name and
// artifact digest, the kernel command line every PXE boot carries, and
// the kernel arguments kiln serve adds (the rootfs digest and the serving
// CA's pin).
package netboot

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
)

// The build's output: the manifest beside the artifacts, the PXE set in
// PXEDir.
const (
	ManifestName = "node.manifest.json"
	PXEDir       = "pxe"
	Kernel       = "vmlinuz"
	Initrd       = "initrd.img"
	Rootfs       = "rootfs.squashfs"
	Script       = "boot.ipxe"
)

// Kernel arguments kiln serve puts on a node's command line.
const (
	// RootfsHashArg pins the root squashfs the initramfs fetches:
	// sha256-<hex>.
	RootfsHashArg = "kiln.rootfs.hash"
	// ServeCAArg pins the CA of kiln serve's HTTPS listener: sha256-<hex>
	// of the CA certificate (DER), as CAPin makes it.
	ServeCAArg = "kiln.serve.ca"
	// ServeURLArg is kiln serve's plain-HTTP base URL
	// (http://<host>:<port>): the agent fetches the CA from <url>/ca.crt
	// (CAPath) and reports its phases to <url>/report/<node name>.
	ServeURLArg = "kiln.serve.url"
	// CAPath is where kiln serve serves the site CA certificate (PEM).
	CAPath = "/ca.crt"
	// ReportPath, then the node's name, is where a node POSTs its
	// first-boot phase: {"phase": "...", "at": "<RFC 3339>"}.
	ReportPath = "/report/"
)

// FileDigest identifies one file by path, sha256 and size; the manifest
// lists every artifact so, paths relative to the output directory.
type FileDigest struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// DigestFile is the FileDigest of the file at p, as the builder writes
// it into the manifest and kiln serve checks it against the manifest.
func DigestFile(p string) (FileDigest, error) {
	f, err := os.Open(p)
	if err != nil {
		return FileDigest{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return FileDigest{}, fmt.Errorf("hashing %s: %w", p, err)
	}
	return FileDigest{Path: p, SHA256: hex.EncodeToString(h.Sum(nil)), Size: n}, nil
}

// BaseCmdline is common to every boot path: the serial console last so
// /dev/console (and the agent's status line) is the serial port, and the
// root overlaid by tmpfs.
var BaseCmdline = []string{"rd.live.overlay.overlayfs=1", "console=tty0", "console=ttyS0,115200"}

// PXECmdline is the kernel command line of a network boot whose kernel,
// initrd and root squashfs are under baseURL, before the image spec's
// extra arguments: the initrd named for EFI, the root fetched by the
// initramfs over the network brought up by DHCP, then BaseCmdline.
func PXECmdline(baseURL string) []string {
	args := []string{"initrd=" + Initrd, "root=live:" + baseURL + "/" + Rootfs, "ip=dhcp", "rd.neednet=1"}
	return append(args, BaseCmdline...)
}

// CAPin is the value of ServeCAArg for a CA certificate (DER).
func CAPin(der []byte) string {
	s := sha256.Sum256(der)
	return "sha256-" + hex.EncodeToString(s[:])
}

// SpecArgs returns the image spec's extra kernel arguments from the
// builder's boot.ipxe: the words of its kernel line after PXECmdline and
// before ${kiln-args}. ok is false when the script has no such line.
func SpecArgs(script string) (args []string, ok bool) {
	const base = "${base-url}"
	std := PXECmdline(base)
	for _, line := range strings.Split(script, "\n") {
		f := strings.Fields(line)
		if len(f) < 2+len(std) || f[0] != "kernel" || f[1] != base+"/"+Kernel {
			continue
		}
		for i, a := range std {
			if f[2+i] != a {
				return nil, false
			}
		}
		rest := f[2+len(std):]
		if len(rest) == 0 || rest[len(rest)-1] != "${kiln-args}" {
			return nil, false
		}
		return append([]string{}, rest[:len(rest)-1]...), true
	}
	return nil, false
}
