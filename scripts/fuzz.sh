#!/usr/bin/env bash
# make fuzz (and make soak, first): each native Go fuzz target over the
# parsers that take untrusted bytes, for FUZZ_TIME each (default 60s), one
# worker each so it runs beside the QEMU scenarios. A failing input is
# written to the package's testdata/fuzz/<target>/, where it stays as a
# regression case that go test runs (commit it with the fix).
set -euo pipefail
cd "$(dirname "$0")/.."
TIME=${FUZZ_TIME:-60s}
targets=(
  "./internal/ignition FuzzParse"          # an Ignition config, any spec
  "./internal/ignition FuzzVerifyHash"     # kiln.config.hash= and verification.hash
  "./firstboot/ignite FuzzDecodeDataURL"   # a config's data: URLs
  "./firstboot/source FuzzTFTPData"        # a TFTP server's packets
  "./firstboot/source FuzzCmdlineArg"      # the kernel command line
  "./firstboot/state FuzzParseRecord"      # a state disk's ownership record
  "./gen/site FuzzParse"                   # the site file
)
for t in "${targets[@]}"; do
	read -r pkg name _ <<<"$t"
	echo "fuzz: $name ($pkg) for $TIME"
	go test -run '^$' -fuzz "^$name\$" -fuzztime "$TIME" -parallel 1 "$pkg"
done
