package bootslot

import (
	"fmt"
	"strings"
)

// scriptVars are the record's variables the script reads.
var scriptVars = []string{varActive, varStaged, varPhase, varTries}

// Script is the grub.cfg fragment that boots a disk node's slots, the
// same choice as Choose: it loads the record's boot variables from
// EnvPath on $root (the ESP), saves a staged slot's tries less one before
// it boots that slot, and otherwise boots the active slot (slot a when
// the record cannot be read), with the extra arguments of the slot's
// Args() file, or extra where it has none. It ends after linux and
// initrd; the menuentry around it, or a boot command after it, boots.
// extra must pass CheckArgs.
func Script(extra []string) string {
	var b strings.Builder
	b.WriteString("# kiln A/B boot (contract/bootslot): a staged slot is tried once.\n")
	for _, v := range scriptVars {
		fmt.Fprintf(&b, "set %s=\n", v)
	}
	fmt.Fprintf(&b, `load_env -f %[1]s %[2]s %[3]s %[4]s %[5]s
set kiln_slot=%[6]s
if [ "${%[2]s}" = "%[7]s" ]; then set kiln_slot=%[7]s; fi
set kiln_left=
if [ "${%[4]s}" = "%[8]s" ]; then
`, EnvPath, varActive, varStaged, varPhase, varTries, A, B, PhaseStaged)
	for n := 1; n <= MaxTries; n++ {
		fmt.Fprintf(&b, "  if [ \"${%s}\" = \"%d\" ]; then set kiln_left=%d; fi\n", varTries, n, n-1)
	}
	fmt.Fprintf(&b, `fi
if [ -n "${kiln_left}" ]; then
  set %[1]s="${kiln_left}"
  if save_env -f %[2]s %[1]s; then
`, varTries, EnvPath)
	for _, s := range Slots {
		fmt.Fprintf(&b, "    if [ \"${%s}\" = \"%s\" ]; then set kiln_slot=%s; fi\n", varStaged, s, s)
	}
	b.WriteString("  fi\nfi\n")
	b.WriteString(setArgs(extra))
	fmt.Fprintf(&b, "if [ \"${kiln_slot}\" = \"%s\" ]; then\n%selse\n%sfi\n", B, loadSlot(B), loadSlot(A))
	return b.String()
}

// loadSlot loads slot s's kernel and initrd, with its arguments file's
// extra arguments when it has one. The expansion is unquoted: GRUB splits
// it into the arguments.
func loadSlot(s Slot) string {
	return fmt.Sprintf("  if [ -f %[1]s ]; then source %[1]s; fi\n  linux %[2]s %[3]s ${%[4]s}\n  initrd %[5]s\n",
		s.Args(), s.Kernel(), strings.Join(Cmdline(s), " "), argsVar, s.Initrd())
}
