#!/bin/bash
# bench_determinism.sh - what "train": {"deterministic": true} costs
# training: the same local job (dlrm-small, 300 steps, evaluation off) with
# and without it, on 1 and 2 workers, three times each, alternating (this
# machine is noisy). Prints each throughput (the median of three runs, each
# run's over all its progress reports) and deterministic / plain as a ratio
# (the issue's bar for making it the default: at least 0.95). The reference
# is the plain run in the same bench. BENCH_CONFIG picks the model. Fails
# when a run fails.
set -u
BUILD=${BUILD:-build}
bin=$BUILD/bin
cfg=${BENCH_CONFIG:-examples/dlrm-small.json}
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT

for det in false true; do
	python3 - "$cfg" "$tmp/$det.json" "$det" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.setdefault("train", {})["deterministic"] = sys.argv[3] == "true"
c.setdefault("data", {})["eval_every"] = 1000000
json.dump(c, open(sys.argv[2], "w"))
PY
done

run() { # run WORKERS DET: prints samples/s
	local out="$tmp/run-$1-$2.out"
	RS_LOG_LEVEL=warn timeout 600 "$bin/rowshift-coordinator" --local --workers "$1" --config "$tmp/$2.json" \
		--steps 300 >"$out" 2>"$tmp/run.err" ||
		{ echo "bench determinism: the run ($1 workers, deterministic $2) failed" >&2; tail -3 "$tmp/run.err" >&2; return 1; }
	python3 - "$out" <<'PY'
import re, statistics, sys
rates = [float(x) for x in re.findall(r"^step +\d+ .* (\d+) samples/s", open(sys.argv[1]).read(), re.M)][1:]
if not rates:
    sys.exit(f"bench determinism: no progress lines in {sys.argv[1]}")
print(statistics.harmonic_mean(rates))
PY
}

for w in 1 2; do
	plain=() det=()
	for i in 1 2 3; do
		r=$(run "$w" false) || exit 1
		plain+=("$r")
		r=$(run "$w" true) || exit 1
		det+=("$r")
	done
	python3 - "$w" "${plain[@]}" "${det[@]}" <<'PY'
import statistics, sys
w = sys.argv[1]
plain = statistics.median(map(float, sys.argv[2:5]))
det = statistics.median(map(float, sys.argv[5:8]))
print(f"determinism_{w}w: plain {plain:.0f} samples/s, deterministic {det:.0f} samples/s, "
      f"ratio {det / plain:.2f} (default-on bar 0.95)")
PY
done
