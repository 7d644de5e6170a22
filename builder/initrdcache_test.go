package builder

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// newc writes a newc cpio archive of name -> content (directories end in /).
func newc(t *testing.T, names []string, content map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	write := func(name string, mode int, data string) {
		fmt.Fprintf(&buf, "070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
			1, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
		buf.WriteString(name + "\x00")
		for buf.Len()%4 != 0 {
			buf.WriteByte(0)
		}
		buf.WriteString(data)
		for buf.Len()%4 != 0 {
			buf.WriteByte(0)
		}
	}
	for _, n := range names {
		if strings.HasSuffix(n, "/") {
			write(strings.TrimSuffix(n, "/"), 0o40755, "")
		} else {
			write(n, 0o100644, content[n])
		}
	}
	write("TRAILER!!!", 0, "")
	for buf.Len()%512 != 0 {
		buf.WriteByte(0)
	}
	return buf.Bytes()
}

func zstdOf(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	w.Close()
	return buf.Bytes()
}

func TestCpioNamesReadsEarlyAndCompressedArchives(t *testing.T) {
	early := newc(t, []string{"kernel/", "kernel/x86/microcode.bin"}, map[string]string{"kernel/x86/microcode.bin": "ucode"})
	main := newc(t, []string{"usr/", "usr/bin/udevadm", "etc/initrd-release"}, map[string]string{"usr/bin/udevadm": "elf", "etc/initrd-release": "gen"})
	got, err := cpioNames(append(early, zstdOf(t, main)...))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"kernel", "kernel/x86/microcode.bin", "usr", "usr/bin/udevadm", "etc/initrd-release"}
	if !slices.Equal(got, want) {
		t.Errorf("cpioNames = %q, want %q", got, want)
	}
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write(main)
	w.Close()
	got, err = cpioNames(append(early, gz.Bytes()...))
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("gzip initramfs: cpioNames = %q, %v; want %q", got, err, want)
	}
	if _, err := cpioNames([]byte("BZh91AY&SY")); err == nil || !strings.Contains(err.Error(), "unknown section") {
		t.Errorf("a bzip2 initramfs: err = %v, want an unknown section error", err)
	}
}

func TestInitrdCacheReusesOnlyWhileIngredientsAreUnchanged(t *testing.T) {
	rootfs := t.TempDir()
	files := map[string]string{"usr/bin/udevadm": "elf v1", "usr/lib/systemd/systemd": "pid1", "usr/bin/kiln": "agent"}
	for n, d := range files {
		p := filepath.Join(rootfs, n)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	image := zstdOf(t, newc(t, []string{"usr/", "usr/bin/udevadm", "usr/lib/systemd/systemd", "etc/initrd-release"},
		map[string]string{"usr/bin/udevadm": "elf v1", "usr/lib/systemd/systemd": "pid1", "etc/initrd-release": "generated"}))
	ing, err := ingredients(rootfs, image)
	if err != nil {
		t.Fatal(err)
	}
	if len(ing) != 2 || ing["/usr/bin/udevadm"] == "" || ing["/usr/lib/systemd/systemd"] == "" {
		t.Fatalf("ingredients = %v, want udevadm and systemd (initrd-release is generated, kiln is not in it)", ing)
	}
	c := initrdCache{dir: t.TempDir()}
	if img, why := c.lookup("k1", rootfs); img != nil || !strings.Contains(why, "no cached initramfs") {
		t.Fatalf("empty cache: image %v, why %q", img != nil, why)
	}
	if err := c.store("k1", image, ing); err != nil {
		t.Fatal(err)
	}
	if img, why := c.lookup("k1", rootfs); !bytes.Equal(img, image) {
		t.Fatalf("same ingredients: not reused (%s)", why)
	}
	// A change outside the initramfs (the kiln agent) keeps the entry.
	os.WriteFile(filepath.Join(rootfs, "usr/bin/kiln"), []byte("agent v2"), 0o755)
	if img, why := c.lookup("k1", rootfs); img == nil {
		t.Fatalf("kiln changed: not reused (%s)", why)
	}
	// A change to a file dracut copied does not.
	os.WriteFile(filepath.Join(rootfs, "usr/bin/udevadm"), []byte("elf v2"), 0o755)
	if img, why := c.lookup("k1", rootfs); img != nil || !strings.Contains(why, "/usr/bin/udevadm changed") {
		t.Fatalf("udevadm changed: image %v, why %q", img != nil, why)
	}
	if img, _ := c.lookup("k2", rootfs); img != nil {
		t.Fatal("another recipe key found the entry")
	}
}

func TestInitrdRecipeChangesWithModulesAndDracutConfig(t *testing.T) {
	rootfs := t.TempDir()
	for n, d := range map[string]string{
		"etc/dracut.conf.d/kiln.conf":                        "hostonly=no",
		"usr/lib/dracut/modules.d/90kiln/module-setup.sh":    "x",
		"usr/lib/modules/6.1.0/kernel/sound/snd.ko":          "s",
		"usr/lib/modules/6.1.0/kernel/drivers/net/virtio.ko": "v",
	} {
		p := filepath.Join(rootfs, n)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(d), 0o644)
	}
	key := func() string {
		k, err := initrdRecipe(rootfs, "6.1.0", "base", []string{"SOURCE_DATE_EPOCH=1"})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	k0 := key()
	if key() != k0 {
		t.Fatal("the recipe key is not stable")
	}
	os.RemoveAll(filepath.Join(rootfs, "usr/lib/modules/6.1.0/kernel/sound"))
	k1 := key()
	if k1 == k0 {
		t.Error("pruning a module did not change the key")
	}
	os.WriteFile(filepath.Join(rootfs, "etc/dracut.conf.d/kiln.conf"), []byte("hostonly=yes"), 0o644)
	if key() == k1 {
		t.Error("changing the dracut configuration did not change the key")
	}
}

// TestCompressInitramfs: zstd that reads back to the archive, the same
// bytes every time, and an initramfs the cache's reader still lists.
func TestCompressInitramfs(t *testing.T) {
	cpio := newc(t, []string{"init", "usr/", "usr/x.ko"}, map[string]string{"init": "#!/bin/sh\n", "usr/x.ko": strings.Repeat("module ", 5000)})
	a, err := compressInitramfs(cpio)
	if err != nil {
		t.Fatal(err)
	}
	b, err := compressInitramfs(cpio)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("two compressions of the same archive differ")
	}
	if !bytes.HasPrefix(a, []byte{0x28, 0xb5, 0x2f, 0xfd}) || len(a) >= len(cpio) {
		t.Fatalf("not a smaller zstd frame: %d bytes from %d, starts %x", len(a), len(cpio), a[:4])
	}
	zr, err := zstd.NewReader(bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	back, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(back, cpio) {
		t.Fatalf("reading back: %v (equal %v)", err, bytes.Equal(back, cpio))
	}
	names, err := cpioNames(a)
	if err != nil || !slices.Contains(names, "usr/x.ko") {
		t.Fatalf("the cache's reader lists %v (%v)", names, err)
	}
}
