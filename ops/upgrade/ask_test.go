package upgrade

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/contract/imagemanifest"
	"github.com/kiln-project/kiln/contract/netboot"
)

// AskFor takes the PXE artifacts' digests from the build's manifest and
// the build's kernel arguments from its iPXE script, and refuses a build
// without them, naming the artifact, or whose script is not the one its
// manifest lists.
func TestAskFor(t *testing.T) {
	script := "#!ipxe\nkernel ${base-url}/vmlinuz " + strings.Join(netboot.PXECmdline("${base-url}"), " ") + " quiet console=ttyS1 ${kiln-args}\n"
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "pxe"), 0o755)
	os.WriteFile(filepath.Join(dir, "pxe", "boot.ipxe"), []byte(script), 0o644)
	sum := sha256.Sum256([]byte(script))
	build := func() *imagemanifest.Build {
		return &imagemanifest.Build{Dir: dir, Versions: rollTarget, Manifest: imagemanifest.Manifest{Artifacts: []netboot.FileDigest{
			{Path: "node.raw", SHA256: strings.Repeat("99", 32)}, {Path: "pxe/boot.ipxe", SHA256: hex.EncodeToString(sum[:])},
			{Path: "pxe/vmlinuz", SHA256: rollAsk.Artifacts.Kernel}, {Path: "pxe/initrd.img", SHA256: rollAsk.Artifacts.Initrd},
			{Path: "pxe/rootfs.squashfs", SHA256: rollAsk.Artifacts.Rootfs}}}}
	}
	want := rollAsk
	want.Args = []string{"quiet", "console=ttyS1"}
	got, err := AskFor(build(), rollAsk.URL)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("AskFor = %+v, %v; want %+v", got, err, want)
	}
	for _, tc := range []struct {
		name string
		edit func(*imagemanifest.Build)
		want string
	}{
		{"no initrd", func(b *imagemanifest.Build) { b.Manifest.Artifacts = slices.Delete(b.Manifest.Artifacts, 3, 4) },
			"node.manifest.json: artifacts: no pxe/initrd.img"},
		{"no iPXE script", func(b *imagemanifest.Build) { b.Manifest.Artifacts = slices.Delete(b.Manifest.Artifacts, 1, 2) },
			"node.manifest.json: artifacts: no pxe/boot.ipxe (the build was made without the pxe output): it holds the build's kernel arguments"},
		{"another iPXE script", func(b *imagemanifest.Build) { b.Manifest.Artifacts[1].SHA256 = strings.Repeat("77", 32) },
			"pxe/boot.ipxe has sha256 " + hex.EncodeToString(sum[:])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := build()
			tc.edit(b)
			if _, err := AskFor(b, rollAsk.URL); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("AskFor = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// A node asked again on the same boot (a re-run) is asked the same
// request, so the answer it gave stands; on another boot, or for
// another build, the request is new.
func TestRequestID(t *testing.T) {
	id := requestID("m2", "boot-1", rollAsk)
	other := rollAsk
	other.Artifacts.Rootfs = strings.Repeat("4d", 32)
	otherArgs := rollAsk
	otherArgs.Args = []string{"quiet"}
	for _, tc := range []struct {
		name string
		got  string
		same bool
	}{
		{"the same boot and build", requestID("m2", "boot-1", rollAsk), true},
		{"another boot", requestID("m2", "boot-2", rollAsk), false},
		{"another node", requestID("m3", "boot-1", rollAsk), false},
		{"another build", requestID("m2", "boot-1", other), false},
		{"other kernel arguments", requestID("m2", "boot-1", otherArgs), false},
	} {
		if (tc.got == id) != tc.same {
			t.Errorf("%s: %s against %s, same: %v", tc.name, tc.got, id, tc.same)
		}
	}
}
