#!/bin/bash
# bench_recovery.sh - what losing a worker costs (README, "Recovery"). A
# local job of 2 workers (BENCH_CONFIG, default examples/bench-1g.json:
# 1 GB of embedding state) with a checkpoint every 20 steps; once one is
# complete, worker-1 is SIGKILLed: the seconds from the loss to the first
# step of the rolled-back world (the survivor drops its generation, the
# ordinal is restarted, both load the checkpoint) are the coordinator's
# "recovered" line. The reference, measured in the same run: the
# restart-based approach, a new coordinator and workers started on the same
# checkpoint (--load), from their start to their first step (the time to
# notice the loss and stop the old world is not counted: in its favour).
# Three rounds, medians. R = 2 recovery (from a replica, no rollback) is not
# built: no figure for it. Fails when a run fails.
set -u
BUILD=${BUILD:-build}
bin=$BUILD/bin
cfg=${BENCH_CONFIG:-examples/bench-1g.json}
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT

wait_for() { # wait_for FILE PATTERN SECONDS
	for _ in $(seq 1 $(($3 * 10))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
	echo "bench recovery: no '$2' in $1 within $3 s" >&2
	tail -5 "${1%.out}.err" >&2
	return 1
}

round() { # round I: prints "ROLLBACK_S RESTART_S STEPS_RETRAINED CHECKPOINT_STEP"
	local i=$1 coord ck
	RS_LOG_LEVEL=warn "$bin/rowshift-coordinator" --local --workers 2 --config "$cfg" --steps 100000 \
		--listen 127.0.0.1:0 --admin-file "$tmp/kill$i.admin" --checkpoint-dir "$tmp/ck$i" --checkpoint-every 20 \
		>"$tmp/kill$i.out" 2>"$tmp/kill$i.err" &
	coord=$!
	wait_for "$tmp/kill$i.out" "checkpoint of step 20 complete" 300 || return 1
	sleep 1 # training goes on past the checkpoint: the rollback retrains those steps
	pkill -9 -P $coord -f -- "--name worker-1 "
	wait_for "$tmp/kill$i.out" "^recovered:" 300 || return 1
	pkill -9 -P $coord 2>/dev/null # its workers first: once it is gone they are no longer its children
	kill -9 $coord
	wait $coord 2>/dev/null
	ck=$(sed -n 's/^recovery: .*; rolling back to \(.*\) (step [0-9]*)$/\1/p' "$tmp/kill$i.out")
	[ -d "$ck" ] || { echo "bench recovery: no checkpoint named in $tmp/kill$i.out" >&2; return 1; }
	local to
	to=$(sed -n 's/^recovery: .*(step \([0-9]*\))$/\1/p' "$tmp/kill$i.out")
	RS_LOG_LEVEL=warn timeout 600 "$bin/rowshift-coordinator" --local --workers 2 --config "$cfg" \
		--steps $((to + 2)) --listen 127.0.0.1:0 --admin-file "$tmp/restart$i.admin" --load "$ck" \
		>"$tmp/restart$i.out" 2>"$tmp/restart$i.err" ||
		{ echo "bench recovery: the restart run failed" >&2; tail -3 "$tmp/restart$i.err" >&2; return 1; }
	python3 - "$tmp/kill$i.out" "$tmp/restart$i.out" <<'PY'
import re, sys
kill, restart = open(sys.argv[1]).read(), open(sys.argv[2]).read()
rec = re.search(r"^recovered: .*, ([0-9.]+) s after the loss \(rolled back (\d+) steps\)", kill, re.M)
to = re.search(r"^recovery: .*\(step (\d+)\)$", kill, re.M)
first = re.search(r"^generation 1 made its first step ([0-9.]+) s after its", restart, re.M)
if not rec or not to or not first:
    sys.exit("bench recovery: missing lines in " + " ".join(sys.argv[1:]))
print(rec.group(1), first.group(1), rec.group(2), to.group(1))
PY
}

rows=()
for i in 1 2 3; do
	r=$(round $i) || exit 1
	rows+=("$r")
	rm -rf "$tmp/ck$i"
done
printf '%s\n' "${rows[@]}" | python3 -c '
import statistics, sys
rows = [[float(x) for x in l.split()] for l in sys.stdin if l.strip()]
rb, rs = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
steps = " ".join(str(int(r[2])) for r in rows)
print(f"bench recovery_rollback: {rb:.2f} s from a SIGKILLed worker to the first step of the rolled-back world "
      f"(2 workers, {sys.argv[1]}; steps retrained per round: {steps}) | restart-based {rs:.2f} s (a new world "
      f"loading the same checkpoint, start to first step) | ratio restart/rollback {rs / rb:.2f} | medians of 3 | "
      f"R = 2 (no rollback, target 10x): not built")
' "$cfg"
