package builder

import (
	"fmt"
	"strings"

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/contract/netboot"
)

// Labels the boot chain finds the root by (the raw disk's root slots are
// contract/bootslot's); docs/architecture.md names them.
const (
	ISOVolumeID   = "KILN"
	ESPPartLabel  = "KILN-ESP"
	isoSquashPath = "/LiveOS/squashfs.img"
	// bootKernel and bootInitrd are the ISO's; the raw disk's are each
	// slot's (bootslot.Slot.Kernel, Initrd).
	bootKernel = "/kiln/vmlinuz"
	bootInitrd = "/kiln/initrd.img"
	bootConfig = "/kiln/boot.cfg"
)

// baseCmdline is common to every boot path (contract/netboot owns it:
// kiln serve boots nodes with it too).
var baseCmdline = netboot.BaseCmdline

func cmdline(root string, extra []string) string {
	args := append([]string{"root=" + root}, baseCmdline...)
	return strings.Join(append(args, extra...), " ")
}

// ISOCmdline boots the squashfs from a CD (or the ISO written to a disk).
func ISOCmdline(extra []string) string { return cmdline("live:CDLABEL="+ISOVolumeID, extra) }

// RawCmdline is the command line the raw disk's GRUB script boots slot a
// with (bootslot.Cmdline, then the spec's extra arguments); kiln-bench
// boots the disk's kernel directly with it.
func RawCmdline(extra []string) string {
	return strings.Join(append(bootslot.Cmdline(bootslot.A), extra...), " ")
}

// grubEmbedded is baked into the EFI GRUB binary: it finds whichever
// medium carries /kiln/boot.cfg (the ISO or the raw disk's ESP).
const grubEmbedded = `serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
search --no-floppy --set=root --file ` + bootConfig + `
configfile ($root)` + bootConfig + `
`

// grubBootCfg is the per-medium GRUB menu: one entry, no wait.
func grubBootCfg(cmd string) string {
	return fmt.Sprintf(`set timeout=0
set default=0
menuentry "kiln" {
	linux %s %s
	initrd %s
}
`, bootKernel, cmd, bootInitrd)
}

// rawBootCfg is the raw disk's GRUB menu: one entry, no wait, whose body
// is the A/B script (bootslot.Script). It loads the record from $root, the
// ESP that grubEmbedded found /kiln/boot.cfg on, and boots the slot the
// record names.
func rawBootCfg(extra []string) string {
	return "set timeout=0\nset default=0\nmenuentry \"kiln\" {\n" + bootslot.Script(extra) + "}\n"
}

// isolinuxCfg boots the ISO under BIOS.
func isolinuxCfg(cmd string) string {
	return fmt.Sprintf(`SERIAL 0 115200
DEFAULT kiln
PROMPT 0
TIMEOUT 0
LABEL kiln
  KERNEL %s
  INITRD %s
  APPEND %s
`, bootKernel, bootInitrd, cmd)
}

// ipxeScript loads kernel and initrd from base-url (default: the TFTP
// server that served the script) and tells the initramfs to fetch the root
// from the same place. kiln-args carries extra kernel arguments such as
// ignition.config.url=.
func ipxeScript(extra []string) string {
	// contract/netboot.SpecArgs reads extra back for kiln serve.
	args := append(netboot.PXECmdline("${base-url}"), extra...)
	return fmt.Sprintf(`#!ipxe
# kiln PXE boot. Set base-url (http://, https:// or tftp://) before chaining
# this script to fetch from elsewhere than the TFTP server; put extra kernel
# arguments (e.g. ignition.config.url=...) in kiln-args.
isset ${base-url} || set base-url tftp://${next-server}
kernel ${base-url}/vmlinuz %s ${kiln-args}
initrd ${base-url}/initrd.img
boot
`, strings.Join(args, " "))
}
