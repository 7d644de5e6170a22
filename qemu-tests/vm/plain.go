package vm

import "regexp"

// A plain boot is the image booted with the kiln agent masked: the
// floor make bench sets every figure beside, and the host-speed check of
// make test's cluster scenario.
const MaskAgent = "systemd.mask=kiln-firstboot.service"

// LoginPrompt is the console line a plain boot ends at: the serial
// getty's prompt. systemd's status lines stop reaching the serial console
// once the getty owns it, so "Reached target multi-user.target" is not a
// usable marker.
var LoginPrompt = regexp.MustCompile(`login: `)
