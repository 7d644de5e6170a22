package upgrade

import (
	"strings"
	"testing"

	"github.com/kiln-project/kiln/contract/imagemanifest"
	"github.com/kiln-project/kiln/contract/netboot"
)

// AskFor takes the PXE artifacts' digests from the build's manifest,
// and refuses a build without them, naming the artifact.
func TestAskFor(t *testing.T) {
	b := &imagemanifest.Build{Dir: "out", Versions: rollTarget, Manifest: imagemanifest.Manifest{Artifacts: []netboot.FileDigest{
		{Path: "node.raw", SHA256: strings.Repeat("99", 32)},
		{Path: "pxe/vmlinuz", SHA256: rollAsk.Artifacts.Kernel}, {Path: "pxe/initrd.img", SHA256: rollAsk.Artifacts.Initrd},
		{Path: "pxe/rootfs.squashfs", SHA256: rollAsk.Artifacts.Rootfs}}}}
	got, err := AskFor(b, rollAsk.URL)
	if err != nil || got != rollAsk {
		t.Errorf("AskFor = %+v, %v; want %+v", got, err, rollAsk)
	}
	b.Manifest.Artifacts = b.Manifest.Artifacts[:2]
	if _, err := AskFor(b, rollAsk.URL); err == nil || !strings.Contains(err.Error(), "out/node.manifest.json: artifacts: no pxe/initrd.img") {
		t.Errorf("AskFor without the initrd = %v", err)
	}
}

// A node asked again on the same boot (a re-run) is asked the same
// request, so the answer it gave stands; on another boot, or for
// another build, the request is new.
func TestRequestID(t *testing.T) {
	id := requestID("m2", "boot-1", rollAsk)
	other := rollAsk
	other.Artifacts.Rootfs = strings.Repeat("4d", 32)
	for _, tc := range []struct {
		name string
		got  string
		same bool
	}{
		{"the same boot and build", requestID("m2", "boot-1", rollAsk), true},
		{"another boot", requestID("m2", "boot-2", rollAsk), false},
		{"another node", requestID("m3", "boot-1", rollAsk), false},
		{"another build", requestID("m2", "boot-1", other), false},
	} {
		if (tc.got == id) != tc.same {
			t.Errorf("%s: %s against %s, same: %v", tc.name, tc.got, id, tc.same)
		}
	}
}
