#!/bin/bash
# bench_pause_sizes.sh - whether a pre-copied reshard's pause stays flat as
# the state grows: examples/bench-1g.json's 4 row-wise tables scaled to
# about 256 MiB, 1 GiB and 4 GiB of state (rows with row-wise Adagrad), in
# local mode on this machine. Each run trains on 2 workers, is asked for 4
# with rowshiftctl scale once it trains (no schedule: the world pauses when
# every member says its background rounds are done), and trains on a few
# steps; three runs a size (RUNS), the median reported. Reported per size:
# the pause, what moved while training and what went again at the pause
# (the median run by its pause); then the pause at 4 GiB beside the one at
# 256 MiB (target: flat, at most 1.5x; the pause is also meant to be at
# most 50 ms, bench_reshard.sh's target). The pause ends with rank 0's
# first step after it; the world stopped for the part before, reported
# beside it (its flatness too, of the medians of the stopped part).
# Exits non-zero when a run fails or is not reported.
set -u
BUILD=${BUILD:-build}
bin=$BUILD/bin
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
wait_for() { # wait_for FILE PATTERN SECONDS
	for _ in $(seq 1 $(($3 * 10))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
	return 1
}
fail=0
runs=${RUNS:-3}
[ "$runs" -ge 1 ] 2>/dev/null || { echo "bench pause sizes: RUNS must be a whole number >= 1"; exit 1; }
for size in 256 1024 4096; do
	python3 - "$size" "$tmp/m$size.json" <<'PY'
import json, sys
c = json.load(open("examples/bench-1g.json"))
for t in c["tables"]:
    t["rows"] = int(sys.argv[1]) * 2**20 // (4 * 260)  # 64 fp32 and one Adagrad float per row
c["cluster"]["memory_per_rank"] = "8GiB"
json.dump(c, open(sys.argv[2], "w"))
PY
	for run in $(seq 1 "$runs"); do
		out=$tmp/s$size.$run.out err=$tmp/s$size.$run.err
		RS_LOG_LEVEL=info timeout 900 "$bin/rowshift-coordinator" --local --config "$tmp/m$size.json" --workers 2 \
			--steps 100000 --admin-file "$tmp/a$size.$run" >"$out" 2>"$err" &
		job=$!
		if ! wait_for "$out" "^step " 300; then
			echo "bench pause_${size}MiB: run $run did not train"; fail=1; kill $job; wait $job; continue
		fi
		"$bin/rowshiftctl" scale --workers 4 --admin-file "$tmp/a$size.$run" >/dev/null
		if ! wait_for "$out" "generation 2 resumed at step" 600; then
			echo "bench pause_${size}MiB: run $run's reshard was not reported"; tail -3 "$err"; fail=1
		fi
		kill -INT $job 2>/dev/null
		wait $job
	done
done
python3 - "$tmp" "$runs" <<'PY' || fail=1
import re, statistics, sys
tmp, runs = sys.argv[1], int(sys.argv[2])
pauses, stopped = {}, {}
for size in (256, 1024, 4096):
    got = []  # per run: pause, stopped, first step, moved MiB, move s, rounds, rows and MiB again
    for run in range(1, runs + 1):
        try:
            out, err = open(f"{tmp}/s{size}.{run}.out").read(), open(f"{tmp}/s{size}.{run}.err").read()
        except OSError:
            continue
        p = re.search(r"generation 2 resumed at step \d+: paused ([\d.]+) s for the reshard \(stopped ([\d.]+) s, "
                      r"then its first step ([\d.]+) s\)", out)
        st = re.search(r"generation 2: staged and verified: moved ([\d.]+) MiB .* move ([\d.]+) s for what was left", out)
        again = re.findall(r"generation 2: pre-copied in (\d+) rounds while training; (\d+) rows \(([\d.]+) MiB\)", err)
        if not (p and st and again):
            print(f"bench pause_{size}MiB: run {run} left no complete report (resumed, staged or pre-copied line)")
        else:
            got.append((float(p.group(1)), float(p.group(2)), float(p.group(3)), st.group(1), float(st.group(2)),
                        max(int(r) for r, _, _ in again), sum(int(n) for _, n, _ in again),
                        sum(float(m) for _, _, m in again)))
    if len(got) < runs or not got:
        continue
    got.sort()
    mid = got[(len(got) - 1) // 2]  # the median run by its pause (the lower middle of an even count)
    pauses[size] = mid[0]
    stopped[size] = statistics.median_low(g[1] for g in got)
    print(f"bench pause_{size}MiB: pause {mid[0]:.3f} s (move {mid[4]:.3f} s for what was left) | "
          f"moved {mid[3]} MiB, up to {mid[5]} rounds while training, {mid[6]} rows ({mid[7]:.2f} MiB) again at the pause "
          f"| target <= 0.050 s {'MET' if mid[0] <= 0.05 else 'MISSED'} | median of {runs} runs: "
          + ", ".join(f"{g[0]:.3f}" for g in got))
    print(f"bench pause_{size}MiB_stopped: the world stopped {mid[1]:.3f} s of the {mid[0]:.3f} s pause "
          f"| the pause's last {mid[2]:.3f} s: rank 0's first step after it | stopped in the {runs} runs "
          + ", ".join(f"{g[1]:.3f}" for g in got) + f", median {stopped[size]:.3f}")
if 256 in stopped and 4096 in stopped:
    r = stopped[4096] / stopped[256]
    print(f"bench pause_stopped_flatness: 4 GiB {stopped[4096]:.3f} s | 256 MiB {stopped[256]:.3f} s (medians) | ratio {r:.2f} "
          f"| target <= 1.5 (flat) {'MET' if r <= 1.5 else 'MISSED'}")
if 256 in pauses and 4096 in pauses:
    r = pauses[4096] / pauses[256]
    print(f"bench pause_flatness: 4 GiB pause {pauses[4096]:.3f} s | 256 MiB pause {pauses[256]:.3f} s | ratio {r:.2f} "
          f"| target <= 1.5 (flat) {'MET' if r <= 1.5 else 'MISSED'}")
sys.exit(0 if len(pauses) == 3 else 1)
PY
exit $fail
