package builder

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/klauspost/compress/zstd"
)

// The initramfs cache. dracut takes about 70 s and reads only a small part
// of the root filesystem, so its output is kept under a key of what it is
// made from, in two parts:
//
//   - the recipe: the base root filesystem's key, the kernel version, the
//     dracut program and configuration, the list of kernel modules (after
//     pruning), kiln's node configuration and the build epoch;
//   - the ingredients: every file of the root filesystem that ended up in
//     the initramfs, by content, listed from the built image itself.
//
// A cached initramfs is used only when its recipe key matches and every
// ingredient still hashes the same; any change to a file dracut copied
// (systemd, udev rules, a module) builds it again.
const initrdCacheVersion = "initrd-cache v2"

// initrdEntry is one cached initramfs and the ingredients it was made from.
type initrdEntry struct {
	Ingredients map[string]string `json:"ingredients"` // path in the image -> sha256 (links: of the target)
}

// initrdRecipe hashes what decides dracut's output besides the files it
// copies verbatim.
func initrdRecipe(rootfs, kver, baseKey string, extra []string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n", initrdCacheVersion, kver, baseKey)
	for _, e := range extra {
		fmt.Fprintf(h, "%d:%s\n", len(e), e)
	}
	for _, dir := range []string{"etc/dracut.conf.d", "usr/lib/dracut", "usr/bin/dracut", "etc/dracut.conf"} {
		if err := hashTree(h, rootfs, dir, true); err != nil {
			return "", fmt.Errorf("initramfs cache key: %w", err)
		}
	}
	if err := hashTree(h, rootfs, filepath.Join("usr/lib/modules", kver), false); err != nil {
		return "", fmt.Errorf("initramfs cache key: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashTree writes every entry under rootfs/rel into h: its path, type and
// size, and with contents also its bytes or link target. A missing rel is
// written as missing.
func hashTree(h io.Writer, rootfs, rel string, contents bool) error {
	root := filepath.Join(rootfs, rel)
	if _, err := os.Lstat(root); errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(h, "missing %s\n", rel)
		return nil
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(p, rootfs)
		if d.IsDir() {
			// A directory's size is the filesystem's, not content: the
			// same tree extracted from the base cache's tar has other
			// sizes than debootstrap left.
			fmt.Fprintf(h, "%s %v\n", name, info.Mode())
			return nil
		}
		fmt.Fprintf(h, "%s %v %d\n", name, info.Mode(), info.Size())
		if !contents {
			return nil
		}
		sum, err := fileOrLinkSum(p, info)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\n", sum)
		return nil
	})
}

func fileOrLinkSum(p string, info fs.FileInfo) (string, error) {
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		return "link:" + target, nil
	case info.Mode().IsRegular():
		f, err := os.Open(p)
		if err != nil {
			return "", err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return "", err
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	return "", nil
}

// ingredients lists the regular files and links of the initramfs image
// that also exist in rootfs under the same path, with their hashes there.
// Files dracut generates (and the directories) are not ingredients.
func ingredients(rootfs string, image []byte) (map[string]string, error) {
	names, err := cpioNames(image)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, n := range names {
		p := filepath.Join(rootfs, n)
		info, err := os.Lstat(p)
		if err != nil || info.IsDir() {
			continue
		}
		sum, err := fileOrLinkSum(p, info)
		if err != nil {
			return nil, fmt.Errorf("hashing %s: %w", n, err)
		}
		if sum != "" {
			out["/"+strings.TrimPrefix(n, "/")] = sum
		}
	}
	return out, nil
}

// unchanged reports whether every ingredient still hashes the same in rootfs.
func (e initrdEntry) unchanged(rootfs string) (bool, string) {
	paths := make([]string, 0, len(e.Ingredients))
	for p := range e.Ingredients {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		info, err := os.Lstat(filepath.Join(rootfs, p))
		if err != nil {
			return false, p
		}
		sum, err := fileOrLinkSum(filepath.Join(rootfs, p), info)
		if err != nil || sum != e.Ingredients[p] {
			return false, p
		}
	}
	return true, ""
}

// initrdCache is the cache directory: <key>/initrd.img beside <key>/ingredients.json.
type initrdCache struct{ dir string }

// lookup returns the cached initramfs for key when its ingredients are
// unchanged in rootfs, and why not otherwise.
func (c initrdCache) lookup(key, rootfs string) ([]byte, string) {
	data, err := os.ReadFile(filepath.Join(c.dir, key, "ingredients.json"))
	if err != nil {
		return nil, "no cached initramfs for this kernel, dracut and module set"
	}
	var e initrdEntry
	if err := json.Unmarshal(data, &e); err != nil || len(e.Ingredients) == 0 {
		return nil, "the cached initramfs's ingredient list does not parse"
	}
	if ok, changed := e.unchanged(rootfs); !ok {
		return nil, changed + " changed since the cached initramfs was built"
	}
	img, err := os.ReadFile(filepath.Join(c.dir, key, "initrd.img"))
	if err != nil {
		return nil, "the cached initramfs is missing"
	}
	return img, ""
}

// store keeps image under key with its ingredients. The image is written
// first, so an entry whose ingredient list exists is whole.
func (c initrdCache) store(key string, image []byte, ing map[string]string) error {
	dir := filepath.Join(c.dir, key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(initrdEntry{Ingredients: ing}, "", " ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, "initrd.img"), image, 0o644, nil); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, "ingredients.json"), data, 0o644, nil)
}

// cpioNames lists the paths in an initramfs: concatenated newc archives,
// uncompressed (dracut's early cpio) or zstd-compressed (the main one).
func cpioNames(image []byte) ([]string, error) {
	var names []string
	r := bufio.NewReader(bytes.NewReader(image))
	for {
		if err := skipZeros(r); err == io.EOF {
			return names, nil
		} else if err != nil {
			return nil, err
		}
		magic, err := r.Peek(6)
		if err != nil {
			return nil, fmt.Errorf("initramfs: %w", err)
		}
		switch {
		case string(magic) == "070701":
			n, err := readNewc(r)
			if err != nil {
				return nil, err
			}
			names = append(names, n...)
		case bytes.Equal(magic[:4], []byte{0x28, 0xb5, 0x2f, 0xfd}):
			zr, err := zstd.NewReader(r)
			if err != nil {
				return nil, err
			}
			return compressedRest(names, zr.IOReadCloser(), "zstd")
		case bytes.Equal(magic[:2], []byte{0x1f, 0x8b}):
			zr, err := gzip.NewReader(r)
			if err != nil {
				return nil, err
			}
			return compressedRest(names, zr, "gzip")
		default:
			return nil, fmt.Errorf("initramfs: unknown section starting %x (only newc cpio, zstd and gzip are read)", magic)
		}
	}
}

// compressedRest reads the compressed archive that ends an initramfs.
func compressedRest(names []string, r io.ReadCloser, how string) ([]string, error) {
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("initramfs (%s part): %w", how, err)
	}
	rest, err := cpioNames(data)
	if err != nil {
		return nil, fmt.Errorf("initramfs (%s part): %w", how, err)
	}
	return append(names, rest...), nil
}

func skipZeros(r *bufio.Reader) error {
	for {
		b, err := r.ReadByte()
		if err != nil {
			return err
		}
		if b != 0 {
			return r.UnreadByte()
		}
	}
}

// readNewc reads one newc archive up to its trailer and returns its names.
func readNewc(r *bufio.Reader) ([]string, error) {
	var names []string
	var read int64
	for {
		hdr := make([]byte, 110)
		if _, err := io.ReadFull(r, hdr); err != nil {
			return nil, fmt.Errorf("initramfs cpio header: %w", err)
		}
		if string(hdr[:6]) != "070701" {
			return nil, fmt.Errorf("initramfs: bad cpio magic %q", hdr[:6])
		}
		field := func(i int) (int64, error) { return strconv.ParseInt(string(hdr[6+8*i:14+8*i]), 16, 64) }
		size, err1 := field(6)
		nameSize, err2 := field(11)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("initramfs cpio header: %w", err)
		}
		name := make([]byte, nameSize)
		if _, err := io.ReadFull(r, name); err != nil {
			return nil, err
		}
		read += 110 + nameSize
		if err := discard(r, pad4(read)); err != nil {
			return nil, err
		}
		read += pad4(read)
		n := strings.TrimRight(string(name), "\x00")
		if n == "TRAILER!!!" {
			return names, nil
		}
		names = append(names, n)
		if err := discard(r, size+pad4(read+size)); err != nil {
			return nil, err
		}
		read += size + pad4(read+size)
	}
}

func pad4(n int64) int64 { return (4 - n%4) % 4 }

func discard(r *bufio.Reader, n int64) error {
	_, err := io.CopyN(io.Discard, r, n)
	return err
}
