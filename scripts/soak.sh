#!/usr/bin/env bash
# make soak: what does not fit CI's budget, on a loaded machine (a
# nice -n 19 busy loop on one core beside the VMs, as a compile on a CI
# machine or a small bare-metal box would be).
#
# By default the three-master lifecycle (TestThreeMastersSoak, never more
# than three guests at once: m1 genesis, m2, m3 join; m3 lost for good and
# removed; worker w1 joins; the master role moved from m2 to w1 with m2
# removed through the API; m3 and the genesis m1 re-imaged) and then
# SOAK_CUTS whole-cluster power cuts in a row (default 5).
# SOAK_TESTS (a go test -run pattern) picks other scenarios:
# TestClusterJoinsAndSurvivesPowerCut (the three-VM cluster, with its
# re-imaging steps, m2's only here), TestTwoNodeClusterSurvivesPowerCut,
# TestMasterRemovedThroughTheAPI. Needs the image in $OUT (make image) and
# bin/kiln. Logs: $OUT/soak.log, consoles under $OUT/qemu-logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
CUTS=${SOAK_CUTS:-${KILN_POWER_CUTS:-5}}
TESTS=${SOAK_TESTS:-TestThreeMastersSoak}
[[ -f "$OUT/node.manifest.json" ]] || { echo "soak: no image in $OUT/: run make image first" >&2; exit 2; }

nice -n 19 sh -c 'while :; do :; done' &
hog=$!
trap 'kill $hog 2>/dev/null || true' EXIT
echo "soak: CPU hog (nice 19) pid $hog; $TESTS with $CUTS whole-cluster power cut(s) in a row"
set +e # the test's status is read from PIPESTATUS below
KILN_QEMU=1 KILN_CLUSTER=1 KILN_SOAK=1 KILN_LIFECYCLE=1 KILN_OUT="$(cd "$OUT" && pwd)" KILN_BIN="$(pwd)/bin/kiln" KILN_POWER_CUTS="$CUTS" \
	go test -count=1 -timeout 330m -parallel 4 -v -run "^($TESTS)\$" ./qemu-tests/ 2>&1 | tee "$OUT/soak.log"
rc=${PIPESTATUS[0]}
set -e
[[ $rc == 0 ]] || go run ./qemu-tests/cmd/failure-recap "$OUT/soak.log"
exit "$rc"
