#!/usr/bin/env bash
# make soak: what does not fit CI's budget. On a loaded machine (a
# nice -n 19 busy loop on one core beside the VMs, as a compile on a CI
# machine or a small bare-metal box would be): the three-VM cluster
# scenario with KILN_POWER_CUTS whole-cluster power cuts in a row (default
# 3) and then the re-imaging steps (KILN_LIFECYCLE=1: w1 re-imaged after
# its removal, m2 removed with kiln node remove and re-imaged), then the
# two-node cluster scenario likewise. SOAK_TESTS (a go test -run pattern)
# picks the scenarios. Needs the image in $OUT (make image) and bin/kiln. Logs: $OUT/soak.log, consoles under
# $OUT/qemu-logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
CUTS=${KILN_POWER_CUTS:-3}
TESTS=${SOAK_TESTS:-TestClusterJoinsAndSurvivesPowerCut|TestTwoNodeClusterSurvivesPowerCut}
[[ -f "$OUT/node.manifest.json" ]] || { echo "soak: no image in $OUT/: run make image first" >&2; exit 2; }

nice -n 19 sh -c 'while :; do :; done' &
hog=$!
trap 'kill $hog 2>/dev/null || true' EXIT
echo "soak: CPU hog (nice 19) pid $hog; cluster scenario with $CUTS power cut(s) in a row"
KILN_QEMU=1 KILN_CLUSTER=1 KILN_LIFECYCLE=1 KILN_OUT="$(cd "$OUT" && pwd)" KILN_BIN="$(pwd)/bin/kiln" KILN_POWER_CUTS="$CUTS" \
	go test -count=1 -timeout 170m -parallel 4 -v -run "^($TESTS)\$" ./qemu-tests/ 2>&1 | tee "$OUT/soak.log"
exit "${PIPESTATUS[0]}"
