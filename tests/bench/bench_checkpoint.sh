#!/bin/bash
# bench_checkpoint.sh - what periodic checkpoints cost training: the same
# local job (2 workers, 400 steps) without checkpoints and with one every 50
# steps (--checkpoint-every 50 --checkpoint-keep 2: each worker copies its
# shards between two steps, a thread writes them while training goes on),
# in BENCH_CKPT_PAIRS (default 5) pairs of runs, one of each, back to back
# (this machine is noisy, and its load drifts over a minute). Prints
# training throughput (each run's over all its progress reports; the
# median over the runs of each kind) side by side, and the ratio: the
# median of the pairs' ratios (target: at most 2% slower), with their range,
# and the checkpoint's size. The reference is the run without checkpoints
# in the same pair. BENCH_CONFIG picks the model (default
# examples/dlrm-small.json); BENCH_CKPT_ROOT where the checkpoints go (a
# directory made under it; default a new one in $TMPDIR or /tmp), to
# measure a volume (/dev/shm: the cost without a disk's writeback).
# Fails when a run fails or a checkpoint is missing.
set -u
BUILD=${BUILD:-build}
bin=$BUILD/bin
cfg=${BENCH_CONFIG:-examples/dlrm-small.json}
intervals=${BENCH_CKPT_EVERY:-50 200}
pairs=${BENCH_CKPT_PAIRS:-5}
tmp=$(mktemp -d)
root=
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf ${root:+"$root"} "$tmp"' EXIT
root=$(mktemp -d "${BENCH_CKPT_ROOT:-$tmp}/bench-ckpt.XXXXXX") || exit 1
fs=$(stat -f -c %T "$root")

run() { # run NAME FLAGS...: prints "SAMPLES_PER_S CHECKPOINT_BYTES"
	local name=$1
	shift
	RS_LOG_LEVEL=warn timeout 600 "$bin/rowshift-coordinator" --local --workers 2 --config "$cfg" --steps 400 \
		--listen 127.0.0.1:0 --admin-file "$tmp/$name.admin" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
		{ echo "bench checkpoint: the $name run failed" >&2; tail -3 "$tmp/$name.err" >&2; return 1; }
	python3 - "$tmp/$name.out" "$#" "$every" <<'PY'
import re, statistics, sys
text = open(sys.argv[1]).read()
rates = [float(x) for x in re.findall(r"^step +\d+ .* (\d+) samples/s", text, re.M)][1:]
done = re.findall(r"checkpoint of step \d+ complete: \S+ \(([0-9.]+) MiB", text)
if not rates or (sys.argv[2] != "0" and len(done) != 400 // int(sys.argv[3])):
    sys.exit(f"bench checkpoint: {len(rates)} progress lines, {len(done)} checkpoints in {sys.argv[1]}")
print(statistics.harmonic_mean(rates), float(done[-1]) if done else 0)  # intervals of equal samples: the overall rate
PY
}
for every in $intervals; do
	results=()
	for i in $(seq "$pairs"); do
		r=$(run none$every.$i) || exit 1
		results+=("none $r")
		r=$(run ckpt$every.$i --checkpoint-dir "$root/ck$every.$i" --checkpoint-every "$every" --checkpoint-keep 2) || exit 1
		results+=("ckpt $r")
	done
	printf '%s\n' "${results[@]}" >"$tmp/results"
	python3 - "$tmp/results" "$cfg" "$every" "$fs" <<'PY' || exit 1
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
def med(kind, i): return statistics.median(float(r[i]) for r in rows if r[0] == kind)
n, c = med("none", 1), med("ckpt", 1)
pairs = [float(rows[k + 1][1]) / float(rows[k][1]) for k in range(0, len(rows), 2)]  # rows alternate none, ckpt
ratio = statistics.median(pairs)
verdict = "MET" if ratio >= 0.98 else "MISSED"
print(f"bench checkpoint_every_{sys.argv[3]}: {c:.0f} samples/s with a checkpoint every {sys.argv[3]} steps "
      f"({med('ckpt', 2):.1f} MiB each, on {sys.argv[4]}) | {n:.0f} without (medians of {len(pairs)} runs each, in pairs; {sys.argv[2]}) | "
      f"ratio {ratio:.3f} (median of the pairs' ratios, {min(pairs):.3f} to {max(pairs):.3f}) | target >= 0.98 {verdict}")
PY
done
