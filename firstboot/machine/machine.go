// Package machine tells one machine from another by its firmware's
// product UUID and its NICs' MAC addresses, so that a state partition is
// used only by the machine that made it. Neither is a secret: this stops
// a disk moved between machines or a stray labelled drive, not a forger.
package machine

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kiln-project/kiln/contract/smbios"
)

// ID is what the agent records of a machine.
type ID struct {
	// ProductUUID is the DMI product UUID, lower case; "" when the
	// firmware gives none or a placeholder.
	ProductUUID string `json:"productUUID,omitempty"`
	// MACs are the physical NICs' addresses, sorted.
	MACs []string `json:"macs,omitempty"`
}

// Empty reports whether id tells nothing about the machine.
func (id ID) Empty() bool { return id.ProductUUID == "" && len(id.MACs) == 0 }

func (id ID) String() string {
	parts := []string{}
	if id.ProductUUID != "" {
		parts = append(parts, "product UUID "+id.ProductUUID)
	}
	if len(id.MACs) > 0 {
		parts = append(parts, "NICs "+strings.Join(id.MACs, ", "))
	}
	if len(parts) == 0 {
		return "no product UUID and no NIC"
	}
	return strings.Join(parts, ", ")
}

// Same reports whether recorded and this are one machine: the same
// product UUID when both have one (a NIC may be replaced), else at least
// one MAC in common. Nothing in common, or nothing to compare, is not
// the same machine.
func Same(recorded, this ID) bool {
	if recorded.ProductUUID != "" && this.ProductUUID != "" {
		return recorded.ProductUUID == this.ProductUUID
	}
	for _, m := range recorded.MACs {
		if slices.Contains(this.MACs, m) {
			return true
		}
	}
	return false
}

// Sysfs reads the machine's identity under Root ("/" on a node).
type Sysfs struct{ Root string }

// Identity reads the product UUID and the physical NICs' MACs.
func (s Sysfs) Identity() (ID, error) {
	var id ID
	b, err := os.ReadFile(filepath.Join(s.Root, "/sys/class/dmi/id/product_uuid"))
	switch {
	case err == nil:
		id.ProductUUID = usableUUID(string(b))
	case !os.IsNotExist(err):
		return id, fmt.Errorf("reading the product UUID: %w", err)
	}
	macs, err := physicalMACs(filepath.Join(s.Root, "/sys/class/net"))
	if err != nil {
		return id, err
	}
	id.MACs = macs
	return id, nil
}

func usableUUID(raw string) string {
	u := strings.ToLower(strings.TrimSpace(raw))
	if len(u) != 36 || smbios.Placeholder(u) {
		return ""
	}
	return u
}

// physicalMACs lists the addresses of NICs backed by a device (not lo,
// bridges, bonds, veths or tunnels), sorted.
func physicalMACs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing NICs: %w", err)
	}
	var macs []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "device")); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "address"))
		if err != nil {
			return nil, fmt.Errorf("reading the MAC of %s: %w", e.Name(), err)
		}
		mac := strings.ToLower(strings.TrimSpace(string(b)))
		if mac != "" && mac != "00:00:00:00:00:00" && !slices.Contains(macs, mac) {
			macs = append(macs, mac)
		}
	}
	slices.Sort(macs)
	return macs, nil
}
