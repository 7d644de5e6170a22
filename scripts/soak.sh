#!/usr/bin/env bash
# make soak: what does not fit CI's budget. On a loaded machine (a
# nice -n 19 busy loop on one core beside the VMs, as a compile on a CI
# machine or a small bare-metal box would be): the cluster scenario with
# KILN_POWER_CUTS whole-cluster power cuts in a row (default 3), then the
# two-node cluster scenario likewise. Needs the
# image in $OUT (make image). Logs: $OUT/soak.log, consoles under
# $OUT/qemu-logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
CUTS=${KILN_POWER_CUTS:-3}
[[ -f "$OUT/node.manifest.json" ]] || { echo "soak: no image in $OUT/: run make image first" >&2; exit 2; }

nice -n 19 sh -c 'while :; do :; done' &
hog=$!
trap 'kill $hog 2>/dev/null || true' EXIT
echo "soak: CPU hog (nice 19) pid $hog; cluster scenario with $CUTS power cut(s) in a row"
KILN_QEMU=1 KILN_CLUSTER=1 KILN_OUT="$(cd "$OUT" && pwd)" KILN_POWER_CUTS="$CUTS" \
	go test -count=1 -timeout 170m -parallel 4 -v -run 'TestClusterJoinsAndSurvivesPowerCut|TestTwoNodeClusterSurvivesPowerCut' ./qemu-tests/ 2>&1 | tee "$OUT/soak.log"
exit "${PIPESTATUS[0]}"
