#!/bin/bash
# bench_reshard.sh - the pause a live reshard costs, with about 1 GB of
# embedding state (4 row-wise tables of 1M x 64 fp32 rows with row-wise
# Adagrad): 2 -> 4 workers, then 4 -> 3, in local mode. Each pause (from the
# first worker pausing to the first step of the new generation) is printed
# beside the bytes the plan moved and the migration rate that implies, and
# beside the restart-based approach measured on the same model in the same
# run: writing a checkpoint of it and starting a fresh world (workers joined,
# tables allocated) - a lower bound on a restart, which must also read the
# checkpoint back. Fails when a run fails.
set -u
BUILD=${BUILD:-build}
cfg=examples/bench-1g.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! RS_LOG_LEVEL=warn timeout 600 "$BUILD/bin/rowshift-coordinator" --local --workers 2 --config $cfg --steps 30 \
	--schedule 10:4,20:3 >"$tmp/live.out" 2>&1; then
	echo "bench reshard: the live run failed"; tail -5 "$tmp/live.out"; exit 1
fi
# restart-based, on the same model: save a checkpoint of 2 workers' state, then time a fresh 4-worker start
start=$(date +%s.%N)
RS_LOG_LEVEL=warn timeout 600 "$BUILD/bin/rowshift-coordinator" --local --workers 2 --config $cfg --steps 1 \
	--save "$tmp/ckpt" >"$tmp/save.out" 2>&1 || { echo "bench reshard: the checkpoint run failed"; exit 1; }
save_run=$(echo "$(date +%s.%N) - $start" | bc)
start=$(date +%s.%N)
RS_LOG_LEVEL=warn timeout 600 "$BUILD/bin/rowshift-coordinator" --local --workers 2 --config $cfg --steps 1 \
	>"$tmp/plain.out" 2>&1 || { echo "bench reshard: the plain run failed"; exit 1; }
plain_run=$(echo "$(date +%s.%N) - $start" | bc)
start=$(date +%s.%N)
RS_LOG_LEVEL=warn timeout 600 "$BUILD/bin/rowshift-coordinator" --local --workers 4 --config $cfg --steps 1 \
	>"$tmp/fresh.out" 2>&1 || { echo "bench reshard: the fresh 4-worker run failed"; exit 1; }
fresh_run=$(echo "$(date +%s.%N) - $start" | bc)
python3 - "$tmp/live.out" "$save_run" "$plain_run" "$fresh_run" <<'PY'
import re, sys
out = open(sys.argv[1]).read()
save_run, plain_run, fresh_run = map(float, sys.argv[2:5])
save = max(save_run - plain_run, 0.0)            # the checkpoint write alone
restart = save + fresh_run                         # stop (free), write, start the new world; reading back not counted
moves = re.findall(r"generation \d+: (\d+) -> (\d+) workers at step \d+; the plan moves ([\d.]+) MiB", out)
pauses = re.findall(r"resumed at step \d+: paused ([\d.]+) s", out)
if len(moves) != 2 or len(pauses) != 2:
    print("bench reshard: the reshards were not reported"); sys.exit(1)
for (a, b, mib), p in zip(moves, pauses):
    p = float(p); mib = float(mib)
    print(f"bench reshard_{a}_to_{b}: pause {p:.2f} s, moved {mib:.0f} MiB ({mib / p:.0f} MiB/s) | "
          f"restart-based lower bound {restart:.2f} s (checkpoint write {save:.2f} s + fresh start {fresh_run:.2f} s) | "
          f"ratio {restart / p:.1f}x shorter | target >= 10x {'MET' if restart / p >= 10 else 'MISSED'}")
PY
