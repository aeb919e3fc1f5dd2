#!/bin/bash
# run.sh - one job of rowshift-members (member.c) on a local coordinator:
# N members join and train, `rowshiftctl scale` to UP once the first step is
# made, to DOWN once that reshard committed; the job ends at step 3 (each
# generation trains one step). Writes the coordinator's stdout and stderr to
# DIR/out and DIR/err; exits with the coordinator's status (124: it ran past
# LIMIT seconds, default 600).
#   usage: BUILD=build bash tests/swarm/run.sh N UP DOWN DIR [LIMIT]
set -u
BUILD=${BUILD:-build}
n=$1 up=$2 down=$3 dir=$4 limit=${5:-600}
bin=$BUILD/bin
mkdir -p "$dir"
step() { # step PATTERN: wait (bounded by the limit) until the coordinator's stdout says PATTERN
	for _ in $(seq 1 $((limit * 10))); do
		grep -q "$1" "$dir/out" 2>/dev/null && return 0
		kill -0 $coord 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}
timeout "$limit" "$bin/rowshift-coordinator" --local --workers "$n" --worker-bin "$BUILD/tests/swarm/rowshift-member" \
	--config examples/minimal.json --steps 3 --debounce-ms 500 --admin-file "$dir/admin" >"$dir/out" 2>"$dir/err" &
coord=$!
step "made its first step" && "$bin/rowshiftctl" scale --workers "$up" --admin-file "$dir/admin" >>"$dir/ctl" 2>&1 &&
	step "^generation 2 committed" && "$bin/rowshiftctl" scale --workers "$down" --admin-file "$dir/admin" >>"$dir/ctl" 2>&1
wait $coord
