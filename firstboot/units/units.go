// Package units holds the systemd units of the kiln node: the agent
// (kiln-firstboot: config; kiln-role: the node's role), the image import
// and the kubelet. The builder installs them into the image and enables
// those with an [Install] section; the agent starts the kubelet itself.
package units

import (
	"bytes"
	"embed"
	"io/fs"
	"sort"
)

//go:embed *.service
var files embed.FS

// Unit is one systemd unit file baked into the image.
type Unit struct {
	Name     string // e.g. kiln-firstboot.service
	Contents []byte
	Enabled  bool // linked into the target named by its [Install] section
}

// All returns the agent's units in name order.
func All() []Unit {
	entries, _ := fs.ReadDir(files, ".")
	var out []Unit
	for _, e := range entries {
		b, _ := files.ReadFile(e.Name())
		out = append(out, Unit{Name: e.Name(), Contents: b, Enabled: bytes.Contains(b, []byte("\n[Install]\n"))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
