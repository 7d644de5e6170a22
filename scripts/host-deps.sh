#!/usr/bin/env bash
# Installs the host tools kiln's build and tests need, from Debian's packages.
# Idempotent and quiet when everything is present: it checks each package with
# dpkg first and runs apt only for what is missing.
set -euo pipefail

pkgs=(
  debootstrap squashfs-tools xorriso           # base rootfs, squashfs, hybrid ISO
  grub-pc-bin grub-efi-amd64-bin grub-common   # BIOS/UEFI boot loaders
  grub-emu                                     # GRUB's script interpreter: contract/bootslot's test
  isolinux syslinux-common                     # ISO BIOS boot + isohybrid MBR
  mtools dosfstools e2fsprogs gdisk fdisk      # ESP and partition tools
  qemu-system-x86 qemu-utils ovmf ipxe-qemu    # QEMU boots (BIOS, UEFI, PXE)
  systemd-container cpio zstd                  # nspawn tests, initramfs tools
  iproute2 iptables                            # kiln-net's real test in a throwaway namespace
  dnsmasq-base                                 # DHCP for the network-boot scenario in a test namespace
  openssh-client                               # ssh into a test node whose config changed (qemu-tests)
  chromium                                     # ops/serve's status page test in a real headless browser
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "host-deps: missing packages: ${missing[*]}; run as root or install them" >&2
  exit 1
fi
echo "host-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
