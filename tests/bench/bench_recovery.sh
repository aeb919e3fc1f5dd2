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
# Three rounds, medians. Then R = 2: 4 workers in 2 replica groups of 2
# (--sharding-group 2, exact sync) lose worker-1 to a SIGKILL and heal from
# the surviving replica, no rollback: the seconds from the loss to the
# healed world's first step (its "recovered" line), beside the same
# restart-based reference for that world (4 workers loading the latest
# checkpoint, start to first step). Then "recovery": "partial": the same 2
# workers as the rollback, worker-1 SIGKILLed; only its rows come back from
# the checkpoint, nothing is trained again: the seconds from the loss to the
# world's first step, the stale rows and how old, beside the rollback's
# restart-based reference. Fails when a run fails.
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
	kill -9 $coord 2>/dev/null
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
restart_s=$(printf '%s\n' "${rows[@]}" | python3 -c '
import statistics, sys
print(statistics.median(float(l.split()[1]) for l in sys.stdin if l.strip()))')
printf '%s\n' "${rows[@]}" | python3 -c '
import statistics, sys
rows = [[float(x) for x in l.split()] for l in sys.stdin if l.strip()]
rb, rs = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
steps = " ".join(str(int(r[2])) for r in rows)
print(f"bench recovery_rollback: {rb:.2f} s from a SIGKILLed worker to the first step of the rolled-back world "
      f"(2 workers, {sys.argv[1]}; steps retrained per round: {steps}) | restart-based {rs:.2f} s (a new world "
      f"loading the same checkpoint, start to first step) | ratio restart/rollback {rs / rb:.2f} | medians of 3 | "
      f"R = 2: below")
' "$cfg"

heal_round() { # heal_round I: prints "HEAL_S RESTART_S"
	local i=$1 coord ck
	RS_LOG_LEVEL=warn "$bin/rowshift-coordinator" --local --workers 4 --sharding-group 2 --config "$cfg" \
		--steps 100000 --listen 127.0.0.1:0 --admin-file "$tmp/heal$i.admin" --checkpoint-dir "$tmp/hck$i" \
		--checkpoint-every 20 >"$tmp/heal$i.out" 2>"$tmp/heal$i.err" &
	coord=$!
	wait_for "$tmp/heal$i.out" "checkpoint of step 20 complete" 300 || return 1
	sleep 1
	pkill -9 -P $coord -f -- "--name worker-1 "
	wait_for "$tmp/heal$i.out" "^recovered:" 300 || return 1
	pkill -9 -P $coord 2>/dev/null
	kill -9 $coord 2>/dev/null
	wait $coord 2>/dev/null
	grep -q "healed from replicas" "$tmp/heal$i.out" ||
		{ echo "bench recovery: round $i did not heal from replicas" >&2; grep "^recover" "$tmp/heal$i.out" >&2; return 1; }
	ck=$(ls -d "$tmp/hck$i"/step-*/ | while read -r d; do [ -f "$d/index.json" ] && echo "$d"; done | tail -1)
	[ -n "$ck" ] || { echo "bench recovery: no complete checkpoint under $tmp/hck$i" >&2; return 1; }
	RS_LOG_LEVEL=warn timeout 600 "$bin/rowshift-coordinator" --local --workers 4 --sharding-group 2 --config "$cfg" \
		--steps 100000 --listen 127.0.0.1:0 --admin-file "$tmp/hrestart$i.admin" --load "$ck" \
		>"$tmp/hrestart$i.out" 2>"$tmp/hrestart$i.err" &
	coord=$!
	wait_for "$tmp/hrestart$i.out" "^generation 1 made its first step" 300 || return 1
	pkill -9 -P $coord 2>/dev/null
	kill -9 $coord 2>/dev/null
	wait $coord 2>/dev/null
	python3 - "$tmp/heal$i.out" "$tmp/hrestart$i.out" <<'PY'
import re, sys
heal, restart = open(sys.argv[1]).read(), open(sys.argv[2]).read()
rec = re.search(r"^recovered: .*, ([0-9.]+) s after the loss \(healed from replicas", heal, re.M)
first = re.search(r"^generation 1 made its first step ([0-9.]+) s after its", restart, re.M)
if not rec or not first:
    sys.exit("bench recovery: missing lines in " + " ".join(sys.argv[1:]))
print(rec.group(1), first.group(1))
PY
}

rows=()
for i in 1 2 3; do
	r=$(heal_round $i) || exit 1
	rows+=("$r")
	rm -rf "$tmp/hck$i"
done
printf '%s\n' "${rows[@]}" | python3 -c '
import statistics, sys
rows = [[float(x) for x in l.split()] for l in sys.stdin if l.strip()]
h, rs = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
print(f"bench recovery_replica: {h:.2f} s from a SIGKILLed worker to the first step of the healed world "
      f"(4 workers in 2 replica groups of 2, {sys.argv[1]}; no rollback, no checkpoint read) | restart-based "
      f"{rs:.2f} s (the same world loading the latest checkpoint, start to first step) | ratio restart/heal "
      f"{rs / h:.2f} (target 10) | medians of 3")
' "$cfg"

# Partial recovery (cluster.recovery "partial"): the same 2 workers; only worker-1's rows come back from the
# checkpoint, the survivor keeps its own, nothing is trained again. Beside the restart-based figure above.
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c.setdefault("cluster", {})["recovery"] = "partial"
json.dump(c, open(sys.argv[2], "w"))' "$cfg" "$tmp/partial.json"
partial_round() { # partial_round I: prints "SECONDS STALE_ROWS STEPS_OLD"
	local i=$1 coord
	RS_LOG_LEVEL=warn "$bin/rowshift-coordinator" --local --workers 2 --config "$tmp/partial.json" --steps 100000 \
		--listen 127.0.0.1:0 --admin-file "$tmp/partial$i.admin" --checkpoint-dir "$tmp/pck$i" --checkpoint-every 20 \
		>"$tmp/partial$i.out" 2>"$tmp/partial$i.err" &
	coord=$!
	wait_for "$tmp/partial$i.out" "checkpoint of step 20 complete" 300 || return 1
	sleep 1
	pkill -9 -P $coord -f -- "--name worker-1 "
	wait_for "$tmp/partial$i.out" "^recovered:" 300 || return 1
	pkill -9 -P $coord 2>/dev/null
	kill -9 $coord 2>/dev/null
	wait $coord 2>/dev/null
	sed -n 's/^recovered: .*, \([0-9.]*\) s after the loss (partial: \([0-9]*\) stale rows restored from step [0-9]*, \([0-9]*\) steps old.*/\1 \2 \3/p' \
		"$tmp/partial$i.out" | grep . ||
		{ echo "bench recovery: round $i did not recover partially" >&2; grep "^recover" "$tmp/partial$i.out" >&2; return 1; }
}
rows=()
for i in 1 2 3; do
	r=$(partial_round $i) || exit 1
	rows+=("$r")
	rm -rf "$tmp/pck$i"
done
printf '%s\n' "${rows[@]}" | python3 -c '
import statistics, sys
rows = [[float(x) for x in l.split()] for l in sys.stdin if l.strip()]
p, rs = statistics.median(r[0] for r in rows), float(sys.argv[2])
old = " ".join(str(int(r[2])) for r in rows)
print(f"bench recovery_partial: {p:.2f} s from a SIGKILLed worker to the first step of the partially recovered world "
      f"(2 workers, {sys.argv[1]}; {int(rows[0][1])} stale rows restored, {old} steps old per round; nothing "
      f"trained again) | restart-based {rs:.2f} s (above) | ratio restart/partial {rs / p:.2f} | medians of 3")
' "$cfg" "$restart_s"
