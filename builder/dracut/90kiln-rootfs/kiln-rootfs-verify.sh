#!/bin/sh
# kiln: with kiln.rootfs.hash=sha256-<hex> on the kernel command line,
# the file the live root is mounted from (the image dracut's livenet
# fetched, or the one on the CD) must have that digest. This runs after
# the root is mounted and before the switch to it: nothing of the image
# has run yet. A mismatch stops the boot and names both digests.

type getarg >/dev/null 2>&1 || . /lib/dracut-lib.sh

kiln_say() {
    echo "kiln: $*" >/dev/console 2>/dev/null
    echo "<27>kiln: $*" >/dev/kmsg 2>/dev/null
}

want=$(getarg kiln.rootfs.hash=)
if [ -n "$want" ]; then
    case "$want" in
    sha256-*) ;;
    *)
        kiln_say "kiln.rootfs.hash=$want: want sha256-<hex>; not booting"
        die "kiln.rootfs.hash=$want: want sha256-<hex>"
        ;;
    esac
    img=""
    for f in /sys/block/loop*/loop/backing_file; do
        [ -r "$f" ] || continue
        b=$(cat "$f")
        case "$b" in
        *.squashfs|*.img) img="$b"; break ;;
        esac
    done
    if [ -z "$img" ] || [ ! -r "$img" ]; then
        kiln_say "kiln.rootfs.hash is set but no root image file backs the live root: not booting it"
        die "kiln: no root image file to check"
    fi
    got="sha256-$(sha256sum "$img" | cut -d' ' -f1)"
    if [ "$got" != "$want" ]; then
        kiln_say "root image $img has digest $got, not $want (kiln.rootfs.hash): not booting it"
        die "kiln: root image digest $got, want $want"
    fi
    kiln_say "root image $img matches kiln.rootfs.hash ($want)"
fi
