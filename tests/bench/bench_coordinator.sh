#!/bin/bash
# bench_coordinator.sh - a coordinator's reshard cycle at 1,024 members: the
# job of tests/unit/test_job_scale.c (members that send what workers send,
# in-process, no sockets, no training: 1,024 join and start; 1,024 -> 1,100;
# 1,100 -> 1,000) at 1,024 members and, for reference in the same run, at
# 128, three times each; prints the medians side by side with their ratio
# (ideal: 8, linear in the members) and the peak memory, and the size of
# the start message every member gets at a reshard. Fails when a run fails.
set -u
BUILD=${BUILD:-build}
prog=$BUILD/tests/unit/test_job_scale
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for n in 128 1024; do
	for r in 1 2 3; do
		RS_LOG_LEVEL=warn RS_SCALE_MEMBERS=$n "$prog" >"$tmp/$n.$r" 2>&1 || {
			echo "bench coordinator: the run of $n members failed" >&2
			tail -5 "$tmp/$n.$r" >&2
			exit 1
		}
	done
done
python3 - "$tmp" <<'PY'
import re, statistics, sys, os
d = sys.argv[1]
def figures(n):
    runs = []
    for r in (1, 2, 3):
        text = open(os.path.join(d, f"{n}.{r}")).read()
        start = float(re.search(r"job_cycle_start_s members=\d+ ([\d.]+)", text).group(1))
        grow = re.search(r"job_cycle_grow_s \S+ pause_and_plan ([\d.]+) stage_and_commit ([\d.]+)", text)
        shrink = re.search(r"job_cycle_shrink_s \S+ pause_and_plan ([\d.]+) stage_and_commit ([\d.]+)", text)
        rss = float(re.search(r"job_cycle_peak_rss_mib members=\d+ ([\d.]+)", text).group(1))
        msg = float(re.search(r"job_cycle_start_message_kib \S+ ([\d.]+)", text).group(1))
        runs.append((start, float(grow.group(1)) + float(grow.group(2)), float(shrink.group(1)) + float(shrink.group(2)),
                     rss, msg))
    return [statistics.median(x) for x in zip(*runs)]
small, big = figures(128), figures(1024)
names = ["join and start, s", "reshard 1,024 -> 1,100 (pause, plan, stage, commit), s",
         "reshard 1,100 -> 1,000, s", "peak memory, MiB", "start message per member, KiB"]
keys = ["start_s", "grow_s", "shrink_s", "peak_rss_mib", "start_message_kib"]
for name, key, a, b in zip(names, keys, small, big):
    print(f"bench coordinator_cycle_{key} 1024 members {b:.3f} | 128 members {a:.3f} | ratio {b / a if a else 0:.1f} (linear: 8.0)  # {name}")
print(f"bench coordinator_cycle_reshard_bytes_sent 1024 members {big[4] * 1100 / 1024:.0f} MiB (every member gets the whole plan, deflated once: common/zjson.h)")
PY
