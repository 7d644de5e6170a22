package builder

import (
	"debug/elf"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kiln-project/kiln/builder/ociimage"
)

// iptables is what kube-proxy's image needs from the root filesystem: the
// nft-backed iptables (the node's own, so both sides of the netfilter
// rules agree) under each name kube-proxy runs, its extension modules,
// and every shared library they load.
var (
	iptablesMulti = "/usr/sbin/xtables-nft-multi"
	iptablesNames = []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"}
	libDirs       = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib"}
)

func iptablesFiles(rootfs string) ([]ociimage.File, error) {
	if err := checkIptablesBackend(rootfs); err != nil {
		return nil, err
	}
	var files []ociimage.File
	for _, n := range iptablesNames {
		files = append(files, ociimage.File{Path: "/usr/sbin/" + n, Source: filepath.Join(rootfs, iptablesMulti), Mode: 0o755})
	}
	elfs := []string{iptablesMulti}
	exts, _ := filepath.Glob(filepath.Join(rootfs, "usr/lib/x86_64-linux-gnu/xtables/*.so"))
	for _, e := range exts {
		elfs = append(elfs, strings.TrimPrefix(e, rootfs))
		files = append(files, ociimage.File{Path: strings.TrimPrefix(e, rootfs), Source: e, Mode: 0o644})
	}
	if len(exts) == 0 {
		return nil, fmt.Errorf("no iptables extensions in the root filesystem (is iptables installed?)")
	}
	libs, err := sharedLibraries(rootfs, elfs)
	if err != nil {
		return nil, err
	}
	for _, l := range libs {
		src, err := resolveIn(rootfs, l)
		if err != nil {
			return nil, err
		}
		files = append(files, ociimage.File{Path: l, Source: src, Mode: 0o755})
	}
	return files, nil
}

// checkIptablesBackend fails when the root filesystem's iptables (Debian's
// alternative) is not the nft backend the images carry: the node's rules
// and the pods' would live in two netfilter worlds that ignore each other.
func checkIptablesBackend(rootfs string) error {
	const alt = "/etc/alternatives/iptables"
	if _, err := os.Lstat(filepath.Join(rootfs, alt)); err != nil {
		return nil // no alternatives: only the images' iptables
	}
	target, err := resolveIn(rootfs, alt)
	if err != nil {
		return err
	}
	if path.Base(target) != path.Base(iptablesMulti) {
		return fmt.Errorf("the root filesystem's iptables is %s, not the nft backend (%s) the images use: update-alternatives --set iptables /usr/sbin/iptables-nft",
			strings.TrimPrefix(target, rootfs), iptablesMulti)
	}
	return nil
}

// ipPaths are where a root filesystem may have iproute2's ip (Debian 12's
// is /bin/ip; /sbin/ip and /usr/sbin/ip link to it).
var ipPaths = []string{"/usr/sbin/ip", "/sbin/ip", "/bin/ip", "/usr/bin/ip"}

// kilnNetFiles is what kiln-net needs from the root filesystem in the kiln
// image: the nft iptables, as kube-proxy's image has it, and iproute2's ip
// at /usr/sbin/ip, with every shared library they load.
func kilnNetFiles(rootfs string) ([]ociimage.File, error) {
	files, err := iptablesFiles(rootfs)
	if err != nil {
		return nil, err
	}
	ip := ""
	for _, p := range ipPaths {
		if _, err := resolveIn(rootfs, p); err == nil {
			ip = p
			break
		}
	}
	if ip == "" {
		return nil, fmt.Errorf("no ip in the root filesystem at %s (is iproute2 installed?)", strings.Join(ipPaths, ", "))
	}
	src, err := resolveIn(rootfs, ip)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, f := range files {
		have[f.Path] = true
	}
	files = append(files, ociimage.File{Path: "/usr/sbin/ip", Source: src, Mode: 0o755})
	libs, err := sharedLibraries(rootfs, []string{ip})
	if err != nil {
		return nil, err
	}
	for _, l := range libs {
		if have[l] {
			continue
		}
		src, err := resolveIn(rootfs, l)
		if err != nil {
			return nil, err
		}
		files = append(files, ociimage.File{Path: l, Source: src, Mode: 0o755})
	}
	return files, nil
}

// sharedLibraries is the closure of the ELF files' interpreters and
// DT_NEEDED libraries, as paths inside rootfs, sorted.
func sharedLibraries(rootfs string, elfs []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	queue := append([]string(nil), elfs...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		src, err := resolveIn(rootfs, p)
		if err != nil {
			return nil, err
		}
		f, err := elf.Open(src)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		needed, err := f.ImportedLibraries()
		interp := interpreter(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		if interp != "" && !seen[interp] {
			seen[interp] = true
			out = append(out, interp)
		}
		for _, n := range needed {
			lib, err := findLibrary(rootfs, n)
			if err != nil {
				return nil, fmt.Errorf("%s needs %s: %w", p, n, err)
			}
			if !seen[lib] {
				seen[lib] = true
				out = append(out, lib)
				queue = append(queue, lib)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

func interpreter(f *elf.File) string {
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err == nil {
				return strings.TrimRight(string(b), "\x00")
			}
		}
	}
	return ""
}

func findLibrary(rootfs, soname string) (string, error) {
	for _, d := range libDirs {
		p := path.Join(d, soname)
		if _, err := os.Stat(filepath.Join(rootfs, p)); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("not found in %s", strings.Join(libDirs, ", "))
}

// resolveIn follows symbolic links of p as the image would see them,
// without ever leaving rootfs, and returns the host path of the file.
func resolveIn(rootfs, p string) (string, error) {
	cur := "/"
	parts := strings.Split(strings.Trim(p, "/"), "/")
	for hops := 0; len(parts) > 0; {
		next := path.Join(cur, parts[0])
		parts = parts[1:]
		fi, err := os.Lstat(filepath.Join(rootfs, next))
		if err != nil {
			return "", fmt.Errorf("%s in the image: %w", p, err)
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("%s in the image: too many symbolic links", p)
		}
		target, err := os.Readlink(filepath.Join(rootfs, next))
		if err != nil {
			return "", err
		}
		if !path.IsAbs(target) {
			target = path.Join(cur, target)
		}
		parts = append(strings.Split(strings.Trim(target, "/"), "/"), parts...)
		cur = "/"
	}
	return filepath.Join(rootfs, cur), nil
}
