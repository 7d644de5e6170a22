package source

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// facts are the values ${mac}, ${uuid} and ${hostname} stand for in a
// config URL.
type facts struct{ mac, uuid, hostname string }

func substitute(u string, f facts) string {
	return strings.NewReplacer("${mac}", f.mac, "${uuid}", f.uuid, "${hostname}", f.hostname).Replace(u)
}

// nodeFacts reads the first non-loopback NIC's MAC (by name order), the
// SMBIOS product UUID and the hostname.
func nodeFacts(root string) facts {
	var f facts
	nics, _ := filepath.Glob(filepath.Join(root, "/sys/class/net/*/address"))
	sort.Strings(nics)
	for _, n := range nics {
		if strings.Contains(n, "/lo/") {
			continue
		}
		if b, err := os.ReadFile(n); err == nil && strings.TrimSpace(string(b)) != "00:00:00:00:00:00" {
			f.mac = strings.TrimSpace(string(b))
			break
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "/sys/class/dmi/id/product_uuid")); err == nil {
		f.uuid = strings.ToLower(strings.TrimSpace(string(b)))
	}
	if b, err := os.ReadFile(filepath.Join(root, "/proc/sys/kernel/hostname")); err == nil {
		f.hostname = strings.TrimSpace(string(b))
	}
	return f
}
