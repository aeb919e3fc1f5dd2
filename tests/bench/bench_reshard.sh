#!/bin/bash
# bench_reshard.sh - what a live reshard costs, with about 1 GB of
# embedding state (examples/bench-1g.json: 4 row-wise tables of 1M x 64 fp32
# rows with row-wise Adagrad), in local mode on this machine:
#   - the pause (training stopped: from the first worker pausing to the first
#     step of the new generation) of 2 -> 4 and 4 -> 3, and its parts (drain,
#     waiting for joiners, plan, migrate = connect + move + verify, commit);
#   - the migration throughput (bytes moved / the slowest member's move time)
#     beside raw loopback TCP measured in the same run (target >= 80%), and
#     beside raw loopback TCP from as many senders to as many receivers as
#     the reshard had (each to each, equal shares of as many bytes, from and
#     into memory in 2 MiB pages as the shards are): the one-pair figure
#     sends a cache-resident buffer over and over, the faster reference;
#   - bytes moved beside the plan diff and the planner's lower bound;
#   - the restart-based approach on the same model in the same run, with
#     rowshift's own checkpoint code: write a checkpoint of the old world,
#     start the new world and load it (to its first step). Target: the live
#     pause at least 10x shorter;
#   - the same reshards pre-copied ("cluster": {"precopy": true}, the
#     default): the pause (target <= 50 ms, and at least 20x shorter than
#     the restart-based path), what was sent again at the pause (rows
#     updated after they were sent), the rounds run while training, and
#     training's speed while they ran beside before the copy began.
# The lines above those come from a run with pre-copy off (every row moves
# at the pause), so that both are measured in the same run.
# Exits non-zero when a run fails, moved bytes differ from the plan diff, or
# a pattern's reference was not measured.
set -u
BUILD=${BUILD:-build}
bin=$BUILD/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for pc in true false; do
	python3 - "$pc" "$tmp/bench-1g-$pc.json" <<'PY'
import json, sys
c = json.load(open("examples/bench-1g.json"))
c.setdefault("cluster", {})["precopy"] = sys.argv[1] == "true"
json.dump(c, open(sys.argv[2], "w"))
PY
done
cfg=$tmp/bench-1g-false.json
coord() { RS_LOG_LEVEL=info timeout 600 "$bin/rowshift-coordinator" --local --config $cfg "$@"; }

raw=$("$BUILD/tests/bench/bench_transport" --raw | sed -n 's/raw loopback TCP \([0-9.]*\) GB\/s/\1/p')
[ -n "$raw" ] || { echo "bench reshard: cannot measure raw loopback TCP"; exit 1; }

if ! coord --workers 2 --steps 30 --schedule 10:4,20:3 >"$tmp/live.out" 2>"$tmp/live.err"; then
	echo "bench reshard: the live run failed"; tail -5 "$tmp/live.err"; exit 1
fi
# the chunk rounds' like-for-like reference: raw loopback TCP in each reshard's pattern (its senders to its
# receivers, the bytes it moved, from and into memory), right after that run: before the restart-based runs' checkpoints
# are written back (measured after them, the reference fell to half)
python3 - "$tmp/live.err" >"$tmp/patterns" <<'PY'
import re, sys
seen = {}
for gen, sent, got in re.findall(r"generation (\d+) staged in [\d.]+ s: sent ([\d.]+) MiB, received ([\d.]+) MiB",
                                 open(sys.argv[1]).read()):
    s, r, m = seen.get(gen, (0, 0, 0.0))
    seen[gen] = (s + (float(sent) > 0), r + (float(got) > 0), m + float(sent))
for gen, (s, r, m) in sorted(seen.items()):
    print(gen, s, r, max(1, int(m)))  # at least 1 MiB: bench_transport's smallest
PY
while read -r gen s r mib; do
	# GB/s, then the pattern; a failed measurement leaves no figure (reported as not measured)
	"$BUILD/tests/bench/bench_transport" --raw-mesh "$s" "$r" "$mib" | sed -n 's/.* \([0-9.]*\) GB\/s$/\1/p' >"$tmp/mesh$gen"
	echo "$s $r $mib" >>"$tmp/mesh$gen"
done <"$tmp/patterns"
# pre-copied: the same reshards, with 150 steps before each for the background rounds (paced to a fifth of
# the old members' time, the default precopy_share, they take 70-80 of them here; the workers of a
# scheduled step are asked for as the run toward it starts)
if ! coord --config "$tmp/bench-1g-true.json" --workers 2 --steps 320 --schedule 150:4,300:3 >"$tmp/pre.out" 2>"$tmp/pre.err"; then
	echo "bench reshard: the pre-copied run failed"; tail -5 "$tmp/pre.err"; exit 1
fi
# restart-based: the old world writes a checkpoint at the reshard step, the new world starts from it
for pair in "2 4 10" "4 3 20"; do
	set -- $pair
	coord --workers "$1" --steps "$3" --save "$tmp/ck$1" >"$tmp/save$1.out" 2>"$tmp/save$1.err" &&
		coord --workers "$2" --steps $(($3 + 1)) --load "$tmp/ck$1" >"$tmp/load$2.out" 2>"$tmp/load$2.err" ||
		{ echo "bench reshard: the restart-based $1 -> $2 runs failed"; tail -3 "$tmp"/*$2.err; exit 1; }
	rm -rf "$tmp/ck$1"
done

python3 - "$tmp" "$raw" <<'PY'
import re, sys
tmp, raw = sys.argv[1], float(sys.argv[2]) * 1e9 / 2**20  # MiB/s
out = open(f"{tmp}/live.out").read()
plans = re.findall(r"generation (\d+): (\d+) -> (\d+) workers at step \d+; the plan moves ([\d.]+) MiB "
                   r"\(lower bound ([\d.]+) MiB\), planned in ([\d.]+) ms", out)
staged = re.findall(r"generation (\d+): staged and verified: moved ([\d.]+) MiB \((\d+) B; the plan diff: (\d+) B\) "
                    r"in ([\d.]+) s \(connect ([\d.]+) s, prepare ([\d.]+) s, move ([\d.]+) s", out)
commits = re.findall(r"generation (\d+) committed: .* drain ([\d.]+) s, waiting for members ([\d.]+) s, plan ([\d.]+) s, "
                     r"migrate ([\d.]+) s, commit ([\d.]+) s", out)
resumed = re.findall(r"generation (\d+) resumed at step \d+: paused ([\d.]+) s", out)
if not (len(plans) == len(staged) == len(commits) == len(resumed) == 2):
    print("bench reshard: the reshards were not all reported"); sys.exit(1)
wrong = 0
for i, (gen, a, b, mib, lb, plan_ms) in enumerate(plans):
    _, moved_mib, moved_b, diff_b, migrate, connect, prepare, move = staged[i]
    _, drain, wait, plan_s, migrate_s, commit = commits[i]
    pause = float(resumed[i][1])
    save = max(float(x) for x in re.findall(r"checkpoint written to \S+ in ([\d.]+) s", open(f"{tmp}/save{a}.err").read()))
    start = float(re.search(r"made its first step ([\d.]+) s after", open(f"{tmp}/load{b}.out").read()).group(1))
    restart = save + start
    rate = float(moved_mib) / float(move) if float(move) > 0 else 0
    e2e = float(moved_mib) / float(migrate)
    wrong += moved_b != diff_b
    print(f"bench reshard_{a}_to_{b}: pause {pause:.3f} s = drain {float(drain):.3f} + waiting for joiners {float(wait):.3f}"
          f" + plan {float(plan_s):.3f} + migrate {float(migrate):.3f} (connect {float(connect):.3f}, prepare {float(prepare):.3f},"
          f" move {float(move):.3f})"
          f" + commit {float(commit):.3f} + first step")
    print(f"bench reshard_{a}_to_{b}_bytes: moved {moved_mib} MiB = plan diff {int(diff_b) / 2**20:.2f} MiB "
          f"({'equal' if moved_b == diff_b else 'DIFFERENT'}) | planner's lower bound {lb} MiB")
    print(f"bench reshard_{a}_to_{b}_migration: {rate:.0f} MiB/s moving chunks (all pairs together) | raw loopback TCP "
          f"{raw:.0f} MiB/s (one pair) | ratio {rate / raw:.2f} | target >= 0.80 {'MET' if rate / raw >= 0.8 else 'MISSED'} "
          f"| end to end (connect, prepare, move, verify) {e2e:.0f} MiB/s, ratio {e2e / raw:.2f}")
    try:
        mesh_gbs, pattern = open(f"{tmp}/mesh{gen}").read().split("\n")[:2]
        mesh, (ns, nr, mesh_mib) = float(mesh_gbs) * 1e9 / 2**20, pattern.split()
        if mesh <= 0:
            raise ValueError("no rate")
        print(f"bench reshard_{a}_to_{b}_migration_vs_pattern: {rate:.0f} MiB/s moving chunks | raw loopback TCP from "
              f"its {ns} sender{'s' * (ns != '1')} to its {nr} receiver{'s' * (nr != '1')} (each to each, equal shares of "
              f"{mesh_mib} MiB, from and into memory) "
              f"{mesh:.0f} MiB/s | ratio {rate / mesh:.2f}")
    except (OSError, ValueError):
        print(f"bench reshard_{a}_to_{b}_migration_vs_pattern: the reference was not measured"); wrong += 1
    print(f"bench reshard_{a}_to_{b}_vs_restart: live pause {pause:.3f} s | restart-based {restart:.3f} s "
          f"(checkpoint write {save:.3f} s + new world started and loaded to its first step {start:.3f} s) | "
          f"{restart / pause:.1f}x shorter | target >= 10x {'MET' if restart / pause >= 10 else 'MISSED'}")
    # the same reshard pre-copied
    pre = open(f"{tmp}/pre.out").read()
    perr = open(f"{tmp}/pre.err").read()
    presumed = dict(re.findall(r"generation (\d+) resumed at step \d+: paused ([\d.]+) s", pre))
    pstaged = {g: rest for g, *rest in re.findall(
        r"generation (\d+): staged and verified: moved [\d.]+ MiB \((\d+) B; the plan diff: (\d+) B\) in ([\d.]+) s "
        r"\(connect [\d.]+ s, prepare [\d.]+ s, move ([\d.]+) s", pre)}
    g = str(i + 2)
    if g not in presumed or g not in pstaged:
        print(f"bench reshard_{a}_to_{b}_precopy: not reported"); wrong += 1; continue
    ppause = float(presumed[g])
    pmoved, pdiff, pmigrate, pmove = pstaged[g]
    wrong += pmoved != pdiff
    again = re.findall(rf"generation {g}: pre-copied in (\d+) rounds while training; (\d+) rows \(([\d.]+) MiB\)", perr)
    rounds = max((int(r) for r, _, _ in again), default=0)
    rows = sum(int(n) for _, n, _ in again)
    mib = sum(float(m) for _, _, m in again)
    print(f"bench reshard_{a}_to_{b}_precopy: pause {ppause:.3f} s (migrate {float(pmigrate):.3f}, of which move "
          f"{float(pmove):.3f}) | pre-copy off, the same reshard {pause:.3f} s: {pause / ppause:.1f}x shorter | "
          f"sent again at the pause {rows} rows ({mib:.2f} MiB) beside the plan diff {int(pdiff) / 2**20:.2f} MiB, "
          f"up to {rounds} rounds while training | target <= 0.050 s {'MET' if ppause <= 0.05 else 'MISSED'}")
    print(f"bench reshard_{a}_to_{b}_precopy_vs_restart: pause {ppause:.3f} s | restart-based {restart:.3f} s | "
          f"{restart / ppause:.1f}x shorter | target >= 20x {'MET' if restart / ppause >= 20 else 'MISSED'}")
    stop = re.search(rf"generation {g} resumed at step \d+: paused [\d.]+ s for the reshard \(stopped ([\d.]+) s, then "
                     r"its first step ([\d.]+) s\)", pre)
    if stop:  # the pause ends with rank 0's first step after it: how much of it the world stood still
        print(f"bench reshard_{a}_to_{b}_precopy_stopped: the world stopped {float(stop.group(1)):.3f} s of the "
              f"{ppause:.3f} s pause | its last {float(stop.group(2)):.3f} s: rank 0's first step after it")
    # training while the rounds ran, per old member, beside its steps before the copy began
    ran = re.findall(rf"generation {g}: training ran at (\d+) samples/s over the (\d+) steps of the background copy, "
                     rf"(\d+) before it \([\d.]+x; precopy_share ([\d.]+)\)", perr)
    if not ran:
        print(f"bench reshard_{a}_to_{b}_precopy_training: not reported"); wrong += 1; continue
    during, before = sum(int(r[0]) for r in ran) / len(ran), sum(int(r[2]) for r in ran) / len(ran)
    print(f"bench reshard_{a}_to_{b}_precopy_training: {during:.0f} samples/s while the rounds ran (up to "
          f"{max(int(r[1]) for r in ran)} steps; the old members' mean) | {before:.0f} samples/s before the copy began | "
          f"ratio {during / before:.2f} (precopy_share {ran[0][3]}: about {1 - float(ran[0][3]):.2f} aimed at)")
sys.exit(1 if wrong else 0)
PY
