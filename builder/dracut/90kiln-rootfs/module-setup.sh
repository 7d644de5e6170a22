#!/bin/bash
# kiln: checks the live root image against kiln.rootfs.hash= before the
# switch to it, so a root image swapped on the way never runs.

check() {
    return 0
}

depends() {
    echo dmsquash-live
}

install() {
    inst_multiple sha256sum cut
    inst_hook pre-pivot 10 "$moddir/kiln-rootfs-verify.sh"
}
