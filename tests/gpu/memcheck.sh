#!/bin/bash
# memcheck.sh - compute-sanitizer over the kernel tests: no out-of-bounds or
# misaligned access, no leak, no error the runtime hides (memcheck), no
# shared-memory race (racecheck), no misused barrier (synccheck). Exits 77
# (skipped) when no CUDA device can be used; fails when there is a device
# but no compute-sanitizer (it ships with the CUDA toolkit: $CUDA_HOME/bin,
# or set COMPUTE_SANITIZER).
set -u
BUILD=${BUILD:-build}
if ! dev=$("$BUILD/bin/rowshift-worker" --device cuda --check-device 2>&1); then
	echo "memcheck: skipped: no CUDA device ($(echo "$dev" | tail -n 1))"
	exit 77
fi
san=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)}
if [ -z "$san" ]; then
	echo "memcheck: FAILED: a CUDA device but no compute-sanitizer (set COMPUTE_SANITIZER)"
	exit 1
fi
fails=0
# memcheck over every kernel test; racecheck and synccheck (slower still) over the
# embedding kernels, the ones with shared memory and barriers of their own
for t in "$BUILD"/tests/gpu/test_*_cuda; do
	tools="memcheck"
	[ "$(basename "$t")" = test_embedding_cuda ] && tools="memcheck racecheck synccheck"
	for tool in $tools; do
		extra=""
		[ $tool = memcheck ] && extra="--leak-check full"
		if "$san" --tool $tool $extra --error-exitcode 99 "$t" >"$BUILD/test-logs/memcheck-$tool-$(basename "$t").log" 2>&1; then
			echo "ok: $tool: $(basename "$t") is clean ($(grep -h 'ERROR SUMMARY' "$BUILD/test-logs/memcheck-$tool-$(basename "$t").log" | tail -n 1))"
		else
			echo "FAILED: $tool: $(basename "$t"):"
			tail -n 30 "$BUILD/test-logs/memcheck-$tool-$(basename "$t").log"
			fails=$((fails + 1))
		fi
	done
done
echo "memcheck: $fails failed"
[ "$fails" = 0 ]
