package serve

import (
	"fmt"
	"strings"

	"github.com/kiln-project/kiln/gen/site"
)

// DnsmasqLine is a dnsmasq command line that answers PXE as a proxy DHCP
// server (the network's DHCP server keeps handing out addresses) for the
// site's MACs only: firmware PXE gets iPXE over TFTP from tftpRoot,
// iPXE gets http://server/boot.ipxe. server is host:port of the plain
// listener, as the machines reach it; subnet the provisioning network's
// address (the proxy range).
func DnsmasqLine(s *site.Site, server, subnet, tftpRoot string) string {
	lines := []string{"dnsmasq --no-daemon --port=0 --log-dhcp",
		fmt.Sprintf("--dhcp-range=%s,proxy", subnet)}
	for _, n := range s.Nodes {
		for _, m := range n.MACs {
			lines = append(lines, fmt.Sprintf("--dhcp-host=%s,set:kiln", m))
		}
	}
	url := "http://" + server + "/boot.ipxe"
	lines = append(lines,
		"--dhcp-ignore='tag:!kiln'",
		"--dhcp-userclass=set:ipxe,iPXE",
		"--enable-tftp --tftp-root="+tftpRoot,
		"--pxe-service='tag:!ipxe,x86PC,kiln,undionly.kpxe'",
		"--pxe-service='tag:!ipxe,X86-64_EFI,kiln,ipxe.efi'",
		"--pxe-service='tag:ipxe,x86PC,kiln,"+url+"'",
		"--pxe-service='tag:ipxe,X86-64_EFI,kiln,"+url+"'")
	return strings.Join(lines, " \\\n    ")
}
