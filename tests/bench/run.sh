#!/bin/bash
# run.sh - the benchmark runner behind `make bench`: runs each benchmark
# binary, keeps its output under $BUILD/bench/, and fails when any benchmark
# reported wrong results (exit status != 0). Timing targets are reported, not
# enforced: these machines are shared and noisy.
set -u
BUILD=${BUILD:-build}
mkdir -p "$BUILD/bench"
. "$(dirname "$0")/../lib/direct_python.sh"
direct_python3 "$BUILD/pybin"
failed=0
for b in "$@"; do
	name=$(basename "$b" .sh)
	echo "== $name"
	case $b in
	*.sh) BUILD=$BUILD bash "$b" ${BENCH_ARGS:-} 2>&1 | tee "$BUILD/bench/$name.txt" ;;
	*) "$b" ${BENCH_ARGS:-} 2>&1 | tee "$BUILD/bench/$name.txt" ;;
	esac
	rc=${PIPESTATUS[0]}
	if [ "$rc" = 77 ]; then echo "SKIP $name"; continue; fi
	[ "$rc" = 0 ] || { echo "FAIL $name: exit $rc (wrong results)"; failed=$((failed + 1)); }
done
grep -h '^bench ' "$BUILD"/bench/*.txt > "$BUILD/bench/summary.txt" 2>/dev/null
echo "bench summary: $BUILD/bench/summary.txt; $failed benchmark(s) with wrong results"
[ "$failed" = 0 ]
