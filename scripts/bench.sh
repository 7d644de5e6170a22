#!/usr/bin/env bash
# make bench: build the default image if out/ has none, then measure build
# and boot times with kiln-bench into bench/results.md, with the
# timelines bench/timeline-<part>.svg beside it. Takes about two hours
# under TCG; set SKIP_COLD=1 to leave out the cold (empty cache) build, and
# ONLY=genesis (or builds,floor,sizes,boots,cluster,upgrade) to run a part
# into bench/results-<parts>.md. The upgrade part rolls a node between the
# image in $OUT/ and make upgrade-images' $OUT-upgrade-v2/: when that build
# is missing and the part runs (ONLY unset or naming upgrade), this script
# runs make upgrade-images first. TIMING=slow runs the genesis part with the
# slow timing profile (a host whose plain boot takes about a minute).
# BOOT=name runs only the boot paths whose name holds it, e.g.
# ONLY=boots BOOT="kiln serve" into bench/results-boots-kiln-serve.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
if [[ ! -f "$OUT/node.manifest.json" ]]; then
	echo "bench: no image in $OUT/, building it first"
	./bin/kiln build -o "$OUT"
fi
if [[ -z "${ONLY:-}" || ",$ONLY," == *,upgrade,* ]] && [[ ! -f "${OUT%/}-upgrade-v2/node.manifest.json" ]]; then
	echo "bench: no upgrade build in ${OUT%/}-upgrade-v2/, building it first (make upgrade-images)"
	make upgrade-images OUT="${OUT%/}"
fi
args=(-kiln bin/kiln -out "$OUT" -results bench/results.md)
if [[ -n "${ONLY:-}" ]]; then
	name=${ONLY//,/-}${BOOT:+-${BOOT// /-}}
	args=(-kiln bin/kiln -out "$OUT" -only "$ONLY" -results "bench/results-$name.md")
fi
[[ -n "${BOOT:-}" ]] && args+=(-boot "$BOOT")
[[ -n "${SKIP_COLD:-}" ]] && args+=(-skip-cold)
[[ -n "${TIMING:-}" ]] && args+=(-genesis-timing "$TIMING")
exec go run ./qemu-tests/cmd/kiln-bench "${args[@]}"
