// Package images owns the image spec: the versioned YAML document that says
// what a kiln node image holds and which artifacts to write, its validation,
// and the default node spec embedded in the kiln binary.
package images

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
)

// APIVersion and Kind identify an image spec document.
const (
	APIVersion = "kiln.dev/v1alpha1"
	Kind       = "Image"
)

// DefaultName is the file name reported for the embedded default spec.
const DefaultName = "images/node.yaml (embedded)"

//go:embed node.yaml
var defaultSpec []byte

// Default returns the embedded default node spec, as written in images/node.yaml.
func Default() []byte { return append([]byte(nil), defaultSpec...) }

// Spec is one image spec document.
type Spec struct {
	APIVersion      string      `json:"apiVersion"`
	Kind            string      `json:"kind"`
	Metadata        Metadata    `json:"metadata"`
	Base            Base        `json:"base"`
	Packages        []string    `json:"packages"`
	Kernel          Kernel      `json:"kernel"`
	Payload         Payload     `json:"payload,omitempty"`
	Components      *Components `json:"components,omitempty"`
	Ignition        string      `json:"ignition,omitempty"`
	ConfigTrust     ConfigTrust `json:"configTrust,omitempty"`
	Outputs         []Output    `json:"outputs"`
	SourceDateEpoch int64       `json:"sourceDateEpoch"`
	Squashfs        Squashfs    `json:"squashfs"`
	Prune           Prune       `json:"prune,omitempty"`

	// Dir is the directory relative paths in the spec are resolved
	// against (the spec file's directory); Hash is the sha256 of the
	// spec's bytes. Neither is part of the document.
	Dir  string `json:"-"`
	Hash string `json:"-"`
}

// Metadata names the image.
type Metadata struct {
	Name string `json:"name"`
}

// Base is the Debian release the root filesystem is bootstrapped from.
type Base struct {
	Suite  string `json:"suite"`
	Mirror string `json:"mirror"`
	Arch   string `json:"arch"`
}

// Kernel selects the kernel package and extra kernel arguments.
type Kernel struct {
	Package string   `json:"package"`
	Cmdline []string `json:"cmdline,omitempty"`
}

// Payload is what is baked in beyond Debian packages: binaries and files
// fetched from a local path, file:// or https:// URL, each pinned by sha256.
type Payload struct {
	Files []PayloadFile `json:"files,omitempty"`
}

// PayloadFile is one file placed into the root filesystem.
type PayloadFile struct {
	Path   string `json:"path"`   // absolute path in the image
	Source string `json:"source"` // relative path, file:///..., or https://...
	SHA256 string `json:"sha256"`
	Mode   string `json:"mode,omitempty"` // octal, default 0644
}

// Components are the pinned Kubernetes node stack baked into the image:
// host programs (kubelet, containerd) and the control plane's container
// images. Each is built from its Go module at Version through the module
// proxy, unless Binaries name release files (pinned by sha256) for its
// programs. Images are prebuilt image archives (docker or OCI tar, e.g.
// official releases) baked as they are; an archive whose repository is
// named like a component image (kube-apiserver, etcd, ...) replaces the
// image kiln would pack from the binary.
type Components struct {
	Kubernetes Component      `json:"kubernetes"`
	Etcd       Component      `json:"etcd"`
	CoreDNS    Component      `json:"coredns"`
	Containerd Component      `json:"containerd"`
	Images     []ImageArchive `json:"images,omitempty"`
}

// Component is one pinned upstream project.
type Component struct {
	Version  string   `json:"version"`
	Binaries []Binary `json:"binaries,omitempty"`
}

// Binary is one release program of a component.
type Binary struct {
	Name   string `json:"name"` // e.g. kubelet
	Source string `json:"source"`
	SHA256 string `json:"sha256"`
}

// ImageArchive is a prebuilt container image archive.
type ImageArchive struct {
	Source string `json:"source"`
	SHA256 string `json:"sha256"`
}

// Programs each component provides, by name.
var Programs = map[string][]string{
	"kubernetes": {"kubelet", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubectl"},
	"etcd":       {"etcd"},
	"coredns":    {"coredns"},
	"containerd": {"containerd", "containerd-shim-runc-v2", "ctr"},
}

// Each returns the components by name, in a fixed order.
func (c *Components) Each() []NamedComponent {
	return []NamedComponent{{"kubernetes", c.Kubernetes}, {"etcd", c.Etcd}, {"coredns", c.CoreDNS}, {"containerd", c.Containerd}}
}

// NamedComponent is a component with its spec key.
type NamedComponent struct {
	Name string
	Component
}

// ConfigTrust says which node configs the agent accepts beyond those
// verified by kiln.config.hash= or by https.
type ConfigTrust struct {
	// AllowUnverified lets a node apply a config fetched over http or
	// tftp, or read from a KILN-CONFIG drive, with no kiln.config.hash=
	// to check it against. Off by default: such a config could come from
	// anyone on the network or at the machine.
	AllowUnverified bool `json:"allowUnverified,omitempty"`
	// CABundles are PEM files (relative to the spec file) whose
	// certificates https config fetches trust besides the system roots.
	CABundles []string `json:"caBundles,omitempty"`
}

// Squashfs selects the root filesystem compression.
type Squashfs struct {
	Compression string `json:"compression"`
	Level       int    `json:"level,omitempty"`
}

// Prune lists what is removed from the root filesystem once every package,
// component and payload file is in place, before the initramfs and the
// squashfs are made from it: state no immutable node uses (apt's lists),
// tools no node runs, kernel modules a server does not need. Paths are
// absolute globs ("/usr/lib/modules/*/kernel/sound"); Keep names globs
// under a pruned path that stay (a module, a locale), so an operator
// keeps one thing without copying the whole list.
type Prune struct {
	Paths []string `json:"paths,omitempty"`
	Keep  []string `json:"keep,omitempty"`
}

// Output is an artifact kind.
type Output string

// The artifacts kiln can write.
const (
	OutputISO Output = "iso"
	OutputRaw Output = "raw"
	OutputPXE Output = "pxe"
)

// Wants reports whether the spec asks for output o.
func (s *Spec) Wants(o Output) bool {
	for _, w := range s.Outputs {
		if w == o {
			return true
		}
	}
	return false
}

// Load reads and validates the spec at path; an empty path means the
// embedded default.
func Load(path string) (*Spec, error) {
	if path == "" {
		return Parse(DefaultName, Default(), ".")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading image spec: %w", err)
	}
	return Parse(path, data, dirOf(path))
}

func hashOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
