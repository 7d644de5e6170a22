package builder

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/kiln-project/kiln/images"
	"github.com/kiln-project/kiln/node/catalog"
)

// fakeNetRootfs gives rootfs what kiln-net's tools come from, laid out as
// Debian 12 has them (ip at /bin/ip behind /usr/sbin/ip, the iptables
// alternative on the nft backend), each program a copy of this host's
// true with its real shared libraries, so the ELF closure is a real one.
func fakeNetRootfs(t *testing.T, rootfs string) {
	t.Helper()
	const prog = "/usr/bin/true"
	libs, err := sharedLibraries("/", []string{prog})
	if err != nil {
		t.Skipf("this host's %s: %v", prog, err)
	}
	cp := func(src, dst string) {
		t.Helper()
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(rootfs, dst)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, at string) {
		t.Helper()
		p := filepath.Join(rootfs, at)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range libs {
		src, err := resolveIn("/", l)
		if err != nil {
			t.Fatal(err)
		}
		cp(src, l)
	}
	cp(prog, iptablesMulti)
	cp(prog, "/usr/lib/x86_64-linux-gnu/xtables/libxt_standard.so")
	link("xtables-nft-multi", "/usr/sbin/iptables-nft")
	link("/usr/sbin/iptables-nft", "/etc/alternatives/iptables")
	cp(prog, "/bin/ip")
	link("/bin/ip", "/usr/sbin/ip")
}

func TestKilnNetFilesCarryIPAndIptablesWithTheirLibraries(t *testing.T) {
	rootfs := t.TempDir()
	fakeNetRootfs(t, rootfs)
	files, err := kilnNetFiles(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{}
	for _, f := range files {
		if _, dup := paths[f.Path]; dup {
			t.Errorf("%s is in the image twice", f.Path)
		}
		paths[f.Path] = f.Source
	}
	libs, _ := sharedLibraries("/", []string{"/usr/bin/true"})
	for _, want := range append([]string{"/usr/sbin/ip", "/usr/sbin/iptables", "/usr/sbin/iptables-restore",
		"/usr/lib/x86_64-linux-gnu/xtables/libxt_standard.so"}, libs...) {
		if _, ok := paths[want]; !ok {
			t.Errorf("%s is missing from the kiln image's files", want)
		}
	}
	if src := paths["/usr/sbin/ip"]; src != filepath.Join(rootfs, "bin/ip") {
		t.Errorf("/usr/sbin/ip comes from %s, want the file behind the links", src)
	}
}

func TestKilnNetFilesNeedIP(t *testing.T) {
	rootfs := t.TempDir()
	fakeNetRootfs(t, rootfs)
	os.Remove(filepath.Join(rootfs, "bin/ip"))
	if _, err := kilnNetFiles(rootfs); err == nil || !strings.Contains(err.Error(), "no ip in the root filesystem") {
		t.Fatalf("got %v, want no ip", err)
	}
}

// A node whose iptables alternative is the legacy backend would not see
// the rules of the images' nft iptables: the build refuses it.
func TestLegacyIptablesIsRefused(t *testing.T) {
	rootfs := t.TempDir()
	fakeNetRootfs(t, rootfs)
	os.WriteFile(filepath.Join(rootfs, "usr/sbin/xtables-legacy-multi"), nil, 0o755)
	os.Remove(filepath.Join(rootfs, "etc/alternatives/iptables"))
	os.Symlink("/usr/sbin/xtables-legacy-multi", filepath.Join(rootfs, "etc/alternatives/iptables"))
	_, err := kilnNetFiles(rootfs)
	if err == nil || !strings.Contains(err.Error(), "not the nft backend") {
		t.Fatalf("got %v, want a refusal of the legacy backend", err)
	}
}

// fakeCatatonit puts a stand-in for Debian's catatonit into rootfs.
func fakeCatatonit(t *testing.T, rootfs string) {
	t.Helper()
	bin := filepath.Join(rootfs, pauseBinary)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("\x7fELF catatonit"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// The pause image is the root filesystem's catatonit in pause mode; an
// image without the package is refused with the way out, not packed
// with something else.
func TestPausePacksCatatonit(t *testing.T) {
	rootfs := t.TempDir()
	b := &build{rootfs: rootfs, opts: Options{Progress: io.Discard, CacheDir: t.TempDir()}, spec: &images.Spec{SourceDateEpoch: 1735689600}}
	if _, err := b.packPause(); err == nil || !strings.Contains(err.Error(), "add the catatonit package to packages") {
		t.Fatalf("without catatonit: %v, want the package named", err)
	}
	fakeCatatonit(t, rootfs)
	im, err := b.packPause()
	if err != nil {
		t.Fatal(err)
	}
	if im.Role != catalog.Pause || !strings.HasPrefix(im.Ref, "kiln.local/pause:") || im.Archive != "/usr/lib/kiln/images/pause.tar" {
		t.Errorf("packed %+v", im)
	}
	img, err := tarball.ImageFromPath(filepath.Join(rootfs, im.Archive), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Config.Entrypoint, " "); got != "/catatonit -P" {
		t.Errorf("entrypoint %q, want /catatonit -P", got)
	}
}
