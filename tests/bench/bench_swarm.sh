#!/bin/bash
# bench_swarm.sh - the coordinator's reshard cycle with 1,024 members over
# the real control channel (tests/swarm/: each member a process that joins
# with the token handshake and answers as a worker, training nothing):
# 1,024 join and start, 1,024 -> 1,100, 1,100 -> 1,000; beside the same at
# 128 (-> 137 -> 125) in the same run. Prints the coordinator's own CPU time
# and peak memory (its process only), and the wall times it reported: on
# this machine every member shares its cores, so those include the members
# parsing their start messages (a thousand processes on a few cores), which
# a cluster does in parallel. Fails when a run fails.
set -u
BUILD=${BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for spec in "128 137 125" "1024 1100 1000"; do
	set -- $spec
	BUILD=$BUILD bash tests/swarm/run.sh "$1" "$2" "$3" "$tmp/$1" 900 || {
		echo "bench swarm: the run of $1 members failed" >&2
		tail -n 5 "$tmp/$1/out" "$tmp/$1/err" >&2
		exit 1
	}
done
python3 - "$tmp" <<'PY'
import re, sys, os
d = sys.argv[1]
def figures(n):
    out = open(os.path.join(d, str(n), "out")).read()
    err = open(os.path.join(d, str(n), "err")).read()
    cpu = re.search(r"the coordinator used ([\d.]+) s of CPU .* at most ([\d.]+) MiB", err)
    start = float(re.search(r"generation 1 made its first step ([\d.]+) s after", out).group(1))
    paused = [float(x) for x in re.findall(r"resumed at step \d+: paused ([\d.]+) s for the reshard", out)]
    commits = re.findall(r"committed: .*plan ([\d.]+) s, migrate ([\d.]+) s, commit ([\d.]+) s", out)
    joins = err.count(" joined (transport at")
    return {"cpu": float(cpu.group(1)), "mib": float(cpu.group(2)), "start": start, "grow": paused[0],
            "shrink": paused[1], "plan": sum(float(c[0]) for c in commits), "joins": joins}
small, big = figures(128), figures(1024)
rows = [("cpu", "coordinator CPU for the whole job (join, start, both reshards), s", 8.0),
        ("mib", "coordinator peak memory, MiB", 8.0),
        ("plan", "planning both reshards, s", 8.0),
        ("start", "start to first step, s (wall: the members' start shares the cores)", None),
        ("grow", "pause 1,024 -> 1,100, s (wall: the members' staging shares the cores)", None),
        ("shrink", "pause 1,100 -> 1,000, s (wall)", None)]
for key, what, linear in rows:
    a, b = small[key], big[key]
    ratio = f" | ratio {b / a:.1f}" + (f" (linear: {linear:.1f})" if linear else "") if a else ""
    print(f"bench swarm_{key} 1024 members {b:.3f} | 128 members {a:.3f}{ratio}  # {what}")
print(f"bench swarm_joins 1024 members {big['joins']} (1,100 members, each joined once: {big['joins'] == 1100})")
sys.exit(0 if big["joins"] == 1100 and small["joins"] == 137 else 1)  # a member turned away is a failure
PY
