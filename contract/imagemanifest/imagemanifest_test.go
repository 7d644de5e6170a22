package imagemanifest

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/contract/netboot"
)

// goodManifest is the shape of a real build's manifest, artifacts of a
// few bytes.
func goodManifest() Manifest {
	return Manifest{
		Name: "node",
		Binaries: []netboot.FileDigest{{Path: "/usr/bin/containerd", SHA256: "5a8c", Size: 9},
			{Path: KilnBinaryPath, SHA256: "0522ca4d", Size: 9}},
		Images: []Image{{Role: "coredns", Ref: "kiln.local/coredns:v1.15.0"}, {Role: "etcd", Ref: "kiln.local/etcd:v3.6.5"},
			{Role: "kiln", Ref: "kiln.local/kiln:7eb0a4037580"}, {Role: "kube-apiserver", Ref: "kiln.local/kube-apiserver:v1.37.1"},
			{Role: "kube-controller-manager", Ref: "kiln.local/kube-controller-manager:v1.37.1"},
			{Role: "kube-proxy", Ref: "kiln.local/kube-proxy:v1.37.1"}, {Role: "kube-scheduler", Ref: "kiln.local/kube-scheduler:v1.37.1"}},
		Artifacts: []netboot.FileDigest{{Path: "node.raw", Size: 3}, {Path: "pxe/rootfs.squashfs", Size: 4}},
	}
}

// writeBuild writes m and an artifact of the listed size for each.
func writeBuild(t *testing.T, m Manifest) string {
	t.Helper()
	dir := t.TempDir()
	for _, a := range m.Artifacts {
		p := filepath.Join(dir, a.Path)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(strings.Repeat("x", int(a.Size))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := json.Marshal(m)
	if err := os.WriteFile(Path(dir), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestOpenReadsTheVersions(t *testing.T) {
	b, err := Open(writeBuild(t, goodManifest()))
	if err != nil {
		t.Fatal(err)
	}
	want := Versions{Kubernetes: "v1.37.1", Etcd: "v3.6.5", KilnSHA256: "0522ca4d"}
	if b.Versions != want {
		t.Errorf("versions %+v, want %+v", b.Versions, want)
	}
}

// Every directory that is not a complete kiln build is refused, naming
// the file and the field, as ErrNotABuild.
func TestOpenRefusesWhatIsNotABuild(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(t *testing.T) string
		want  []string
	}{
		{"no manifest", func(t *testing.T) string { return t.TempDir() }, []string{"node.manifest.json"}},
		{"not JSON", func(t *testing.T) string {
			dir := t.TempDir()
			os.WriteFile(Path(dir), []byte("<html>"), 0o644)
			return dir
		}, []string{"node.manifest.json", "invalid character"}},
		{"a missing artifact", func(t *testing.T) string {
			dir := writeBuild(t, goodManifest())
			os.Remove(filepath.Join(dir, "pxe", "rootfs.squashfs"))
			return dir
		}, []string{"artifacts[1] pxe/rootfs.squashfs", "no such file"}},
		{"a truncated artifact", func(t *testing.T) string {
			dir := writeBuild(t, goodManifest())
			os.WriteFile(filepath.Join(dir, "node.raw"), []byte("x"), 0o644)
			return dir
		}, []string{"artifacts[0] node.raw: 1 bytes on disk, the manifest says 3"}},
		{"no artifacts", func(t *testing.T) string {
			m := goodManifest()
			m.Artifacts = nil
			return writeBuild(t, m)
		}, []string{"artifacts: none listed"}},
		{"no etcd image", func(t *testing.T) string {
			m := goodManifest()
			m.Images = m.Images[2:]
			return writeBuild(t, m)
		}, []string{"images: no etcd image"}},
		{"an untagged image", func(t *testing.T) string {
			m := goodManifest()
			m.Images[1].Ref = "kiln.local:5000/etcd"
			return writeBuild(t, m)
		}, []string{`images[1].ref "kiln.local:5000/etcd": no tag`}},
		{"two Kubernetes releases", func(t *testing.T) string {
			m := goodManifest()
			m.Images[5].Ref = "kiln.local/kube-proxy:v1.36.0"
			return writeBuild(t, m)
		}, []string{"kube-proxy is v1.36.0 but kube-apiserver is v1.37.1"}},
		{"no kiln binary", func(t *testing.T) string {
			m := goodManifest()
			m.Binaries = m.Binaries[:1]
			return writeBuild(t, m)
		}, []string{"binaries: no /usr/bin/kiln"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(tc.build(t))
			if !errors.Is(err, ErrNotABuild) {
				t.Fatalf("Open: %v, want ErrNotABuild", err)
			}
			for _, w := range append(tc.want, "not the output of kiln build") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
