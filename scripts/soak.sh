#!/usr/bin/env bash
# make soak: what does not fit CI's budget, on a loaded machine (a
# nice -n 19 busy loop on one core beside the VMs, as a compile on a CI
# machine or a small bare-metal box would be).
#
# By default the three-master lifecycle (TestThreeMastersSoak, never more
# than three guests at once: m1 genesis, m2, m3 join; m3 lost for good and
# removed; worker w1 joins; the master role moved from m2 to w1 with m2
# removed through the API; m3 and the genesis m1 re-imaged) and then
# SOAK_CUTS whole-cluster power cuts in a row (default 5), then
# TestEtcdRestore (a one-master cluster restored from a snapshot).
# SOAK_TESTS (a go test -run pattern) picks other scenarios:
# TestClusterJoinsAndSurvivesPowerCut (the three-VM cluster, with its
# re-imaging steps, m2's only here), TestTwoNodeClusterSurvivesPowerCut,
# TestMasterRemovedThroughTheAPI. SOAK_CORES (for instance 1.2) holds the
# run to that many cores' worth of CPU with a CFS quota (a cgroup of its
# own, v1 or v2, removed at the end): a host slower than this one, such as
# the CI machines where the scenarios collapsed; SOAK_HOST=slow adds
# KILN_SLOW_HOST=1 (make test's two-node scenario instead of the three-VM
# one). Needs the image in $OUT (make image) and bin/kiln. Logs:
# $OUT/soak.log, consoles under $OUT/qemu-logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
CUTS=${SOAK_CUTS:-${KILN_POWER_CUTS:-5}}
TESTS=${SOAK_TESTS:-TestThreeMastersSoak|TestEtcdRestore}
[[ -f "$OUT/node.manifest.json" ]] || { echo "soak: no image in $OUT/: run make image first" >&2; exit 2; }

# quota_cgroup N: a cgroup limited to N cores' worth of CPU, this shell in
# it (so the test and every VM it starts); prints the cgroup's directory.
quota_cgroup() {
	local cores=$1 dir period=20000 quota
	quota=$(awk -v c="$cores" -v p=$period 'BEGIN { q = int(c * p); if (q < 1000) exit 1; print q }') ||
		{ echo "soak: SOAK_CORES=$cores: want a number of cores of at least 0.05" >&2; exit 2; }
	if [[ -d /sys/fs/cgroup/cpu && -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]]; then
		dir=/sys/fs/cgroup/cpu/kiln-soak-$$
		mkdir "$dir" && echo $period >"$dir/cpu.cfs_period_us" && echo "$quota" >"$dir/cpu.cfs_quota_us" || exit 2
	elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
		dir=/sys/fs/cgroup/kiln-soak-$$
		mkdir "$dir" && echo "$quota $period" >"$dir/cpu.max" || exit 2
	else
		echo "soak: SOAK_CORES needs the cgroup cpu controller (v1 /sys/fs/cgroup/cpu or v2 cpu.max); neither is here" >&2
		exit 2
	fi
	echo $$ >"$dir/cgroup.procs" || exit 2
	echo "$dir"
}

hog=
cg=
cleanup() {
	[[ -n $hog ]] && kill "$hog" 2>/dev/null
	if [[ -n $cg ]]; then # back to the parent, then the emptied cgroup goes
		echo $$ >"$(dirname "$cg")/cgroup.procs" 2>/dev/null
		rmdir "$cg" 2>/dev/null || echo "soak: $cg still holds processes; remove it with rmdir once they end" >&2
	fi
	return 0
}
trap cleanup EXIT
nice -n 19 sh -c 'while :; do :; done' & # outside the quota: the host's own load
hog=$!
if [[ -n ${SOAK_CORES:-} ]]; then
	cg=$(quota_cgroup "$SOAK_CORES") || exit 2
	echo "soak: held to $SOAK_CORES cores' worth of CPU ($cg)"
fi
if [[ ${SOAK_HOST:-} == slow ]]; then export KILN_SLOW_HOST=1; fi
echo "soak: CPU hog (nice 19) pid $hog; $TESTS with $CUTS whole-cluster power cut(s) in a row"
set +e # the test's status is read from PIPESTATUS below
KILN_QEMU=1 KILN_CLUSTER=1 KILN_SOAK=1 KILN_LIFECYCLE=1 KILN_OUT="$(cd "$OUT" && pwd)" KILN_BIN="$(pwd)/bin/kiln" KILN_POWER_CUTS="$CUTS" \
	go test -count=1 -timeout 330m -parallel 4 -v -run "^($TESTS)\$" ./qemu-tests/ 2>&1 | tee "$OUT/soak.log"
rc=${PIPESTATUS[0]}
set -e
[[ $rc == 0 ]] || go run ./qemu-tests/cmd/failure-recap "$OUT/soak.log"
exit "$rc"
