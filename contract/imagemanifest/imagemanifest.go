// Package imagemanifest is what the operator's tools read of a kiln
// build's node.manifest.json (the builder writes it, builder.Manifest):
// the baked images and the Kubernetes and etcd releases their tags
// carry, the kiln binary's digest, and the artifacts, checked present.
// It reads the builder's output as it is and never changes it.
package imagemanifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kiln-project/kiln/contract/netboot"
	"github.com/kiln-project/kiln/contract/nodefile"
)

// Image is one baked container image (the manifest's images[]).
type Image struct {
	Role   string `json:"role"`
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
}

// Manifest is the part of node.manifest.json an operator's tool reads.
type Manifest struct {
	Name       string               `json:"name"`
	SpecSHA256 string               `json:"specSHA256"`
	Kernel     string               `json:"kernel"`
	Binaries   []netboot.FileDigest `json:"binaries"`
	Images     []Image              `json:"images"`
	Artifacts  []netboot.FileDigest `json:"artifacts"`
}

// The image roles whose tags carry a release, as node/catalog names
// them (builder/manifest_test.go holds the two to one another).
const (
	roleEtcd      = "etcd"
	roleAPIServer = "kube-apiserver"
)

// kubernetesRoles are the images built from one Kubernetes release: their
// tags must agree.
var kubernetesRoles = []string{roleAPIServer, "kube-controller-manager", "kube-scheduler", "kube-proxy"}

// KilnBinaryPath is the manifest's binaries entry of the node's kiln.
const KilnBinaryPath = nodefile.KilnBinary

// Versions are what a build carries that a rolling upgrade compares.
// Kiln is the kiln binary's sha256: the manifest records no kiln version
// string (the kiln image's tag is a digest of its tools, not kiln's
// version).
type Versions struct {
	Kubernetes string
	Etcd       string
	KilnSHA256 string
}

// ErrNotABuild is wrapped by every refusal of a directory that is not
// the complete output of kiln build.
var ErrNotABuild = errors.New("not the output of kiln build")

// Build is a kiln build's output directory and its manifest.
type Build struct {
	Dir      string
	Manifest Manifest
	Versions Versions
}

// Path is the manifest's path in the build directory dir.
func Path(dir string) string { return filepath.Join(dir, netboot.ManifestName) }

// Open reads dir's manifest and its versions and checks every artifact
// it lists is there with its size (hashing them is left to what stages
// them). Every error names the file and field and wraps ErrNotABuild.
func Open(dir string) (*Build, error) {
	p := Path(dir)
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotABuild, err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", p, ErrNotABuild, err)
	}
	v, err := m.Versions()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", p, ErrNotABuild, err)
	}
	if err := m.checkArtifacts(dir); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", p, ErrNotABuild, err)
	}
	return &Build{Dir: dir, Manifest: m, Versions: v}, nil
}

// Versions derives the releases from the images' tags and the kiln
// binary's digest; every missing or disagreeing one is named.
func (m Manifest) Versions() (Versions, error) {
	var v Versions
	var errs []error
	var err error
	if v.Kubernetes, err = m.kubernetes(); err != nil {
		errs = append(errs, err)
	}
	if v.Etcd, err = m.tag(roleEtcd); err != nil {
		errs = append(errs, err)
	}
	if v.KilnSHA256, err = m.kilnDigest(); err != nil {
		errs = append(errs, err)
	}
	return v, errors.Join(errs...)
}

func (m Manifest) kubernetes() (string, error) {
	want, err := m.tag(roleAPIServer)
	if err != nil {
		return "", err
	}
	for _, r := range kubernetesRoles[1:] {
		got, err := m.tag(r)
		if err != nil {
			return "", err
		}
		if got != want {
			return "", fmt.Errorf("images: %s is %s but %s is %s: one build carries one Kubernetes release", r, got, roleAPIServer, want)
		}
	}
	return want, nil
}

// tag is the tag of the image with the role.
func (m Manifest) tag(role string) (string, error) {
	for i, im := range m.Images {
		if im.Role != role {
			continue
		}
		at := strings.LastIndex(im.Ref, ":")
		if at < 0 || strings.Contains(im.Ref[at:], "/") || at == len(im.Ref)-1 {
			return "", fmt.Errorf("images[%d].ref %q: no tag (the release of %s)", i, im.Ref, role)
		}
		return im.Ref[at+1:], nil
	}
	return "", fmt.Errorf("images: no %s image", role)
}

func (m Manifest) kilnDigest() (string, error) {
	for i, b := range m.Binaries {
		if b.Path == KilnBinaryPath {
			if b.SHA256 == "" {
				return "", fmt.Errorf("binaries[%d] (%s): no sha256", i, KilnBinaryPath)
			}
			return b.SHA256, nil
		}
	}
	return "", fmt.Errorf("binaries: no %s", KilnBinaryPath)
}

// checkArtifacts names every artifact that is missing or of another size
// than the manifest says.
func (m Manifest) checkArtifacts(dir string) error {
	if len(m.Artifacts) == 0 {
		return errors.New("artifacts: none listed")
	}
	var errs []error
	for i, a := range m.Artifacts {
		p := filepath.Join(dir, filepath.FromSlash(a.Path))
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("artifacts[%d] %s: %w", i, a.Path, err))
		case fi.Size() != a.Size:
			errs = append(errs, fmt.Errorf("artifacts[%d] %s: %d bytes on disk, the manifest says %d", i, a.Path, fi.Size(), a.Size))
		}
	}
	return errors.Join(errs...)
}
