#!/bin/bash
# run.sh - the test runner behind `make test`.
#
#   run.sh KIND PROGRAM...   run each program with a timeout and record the result
#   run.sh --summary         print "N passed, N failed, N skipped" and fail if any failed
#
# KIND is static, unit, gpu, fuzz or integration. A program exiting 0 passed, 77
# skipped (it prints why), anything else failed. Results accumulate in
# $BUILD/test-results until the summary; each program's output goes to the
# terminal as it runs and to $BUILD/test-logs/NAME.log.
#   RS_TEST_TIMEOUT  seconds per program (default 300)
#   FUZZ_SECONDS     fuzz: seconds of exploration per target after its corpus
#   RS_FUZZ_JOBS     fuzz: targets run at once (default 2)
#   RS_REQUIRE_GPU=1 gpu: a skip (no device) counts as a failure
set -u
BUILD=${BUILD:-build}
results="$BUILD/test-results"
logs="$BUILD/test-logs"
mkdir -p "$logs"

if [ "${1:-}" = "--summary" ]; then
	[ -f "$results" ] || { echo "no tests were run"; exit 1; }
	p=$(grep -c '^PASS ' "$results"); f=$(grep -c '^FAIL ' "$results"); s=$(grep -c '^SKIP ' "$results")
	echo "----------------------------------------------------------------"
	grep -E '^(FAIL|SKIP) ' "$results" | sed 's/^/  /'
	echo "tests: $p passed, $f failed, $s skipped"
	[ "$f" = 0 ]
	exit
fi

kind=$1; shift
[ $# -gt 0 ] || exit 0
timeout_s=${RS_TEST_TIMEOUT:-300}

# run_one PROG: run it, record its result line
run_one() {
	local prog=$1 name log start rc elapsed
	name=$(basename "$prog" .sh)
	log="$logs/$kind-$name.log"
	start=$(date +%s)
	case $kind in
	fuzz)
		local fname=${name#fuzz_}
		local corpus="tests/fuzz/corpus/$fname"
		local work="$BUILD/fuzz/work/$fname" art="$BUILD/fuzz/artifacts/$fname/"
		mkdir -p "$work" "$art" "$corpus"
		timeout -k 10 $((${FUZZ_SECONDS:-8} + 120)) "$prog" \
			-max_total_time="${FUZZ_SECONDS:-8}" -print_final_stats=1 \
			-artifact_prefix="$art" -timeout=10 -rss_limit_mb=2048 -error_exitcode=99 \
			"$work" "$corpus" >"$log" 2>&1
		rc=$?
		{ echo "== $kind $name"; tail -n 4 "$log"; } | flock "$logs/.print.lock" cat
		;;
	integration|static)
		echo "== $kind $name"
		BUILD=$BUILD timeout -k 10 "$timeout_s" bash "$prog" 2>&1 | tee "$log"
		rc=${PIPESTATUS[0]}
		;;
	*)
		echo "== $kind $name"
		timeout -k 10 "$timeout_s" "$prog" 2>&1 | tee "$log"
		rc=${PIPESTATUS[0]}
		;;
	esac
	elapsed=$(( $(date +%s) - start ))
	case $rc in
	0) echo "PASS $kind $name (${elapsed}s)" >>"$results" ;;
	77)
		if [ "$kind" = gpu ] && [ "${RS_REQUIRE_GPU:-0}" = 1 ]; then
			echo "FAIL $kind $name: skipped but a GPU is required" >>"$results"
		else
			echo "SKIP $kind $name: $(tail -n 1 "$log")" >>"$results"
		fi ;;
	124|137) echo "FAIL $kind $name: timed out after ${timeout_s}s" >>"$results" ;;
	*) echo "FAIL $kind $name: exit $rc (log: $log)" >>"$results" ;;
	esac
}

# Fuzz targets are independent and CPU-bound: RS_FUZZ_JOBS (default 2) at a
# time, their lines recorded in the order given. Everything else, one by one.
jobs_max=1
[ "$kind" = fuzz ] && jobs_max=${RS_FUZZ_JOBS:-2}
case $jobs_max in
'' | *[!0-9]*) echo "run.sh: RS_FUZZ_JOBS must be a number, got '$jobs_max'" >&2; exit 2 ;;
esac
if [ "$jobs_max" -le 1 ]; then
	for prog in "$@"; do run_one "$prog"; done
	exit 0
fi
parts=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$parts"' EXIT INT TERM
i=0
for prog in "$@"; do
	while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
	i=$((i + 1))
	results="$parts/$(printf %04d $i)" run_one "$prog" &
done
wait
cat "$parts"/* >>"$results"
exit 0
