#!/bin/bash
# bench_train.sh - training throughput of the demo model in local mode, with 1
# and 2 CPU worker processes on this machine (samples per second, as the
# workers report them; the reference is the 1-worker run of the same
# benchmark). Fails when a run fails or does not learn (final AUC <= 0.55).
set -u
BUILD=${BUILD:-build}
steps=200
[ "${1:-}" = "--quick" ] && steps=60
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
declare -A sps
for w in 1 2; do
	if ! RS_LOG_LEVEL=warn timeout 300 "$BUILD/bin/rowshift-coordinator" --local --workers $w \
		--config examples/dlrm-small.json --steps $steps --log-json "$tmp/w$w.json" >/dev/null; then
		echo "bench train: the $w-worker run failed"
		exit 1
	fi
	read -r sps[$w] auc < <(python3 - "$tmp/w$w.json" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
train = [l["samples_per_s"] for l in lines if "auc" not in l][1:]  # reports without evaluation time, after warm-up
aucs = [l["auc"] for l in lines if "auc" in l]
print(f"{sum(train) / max(len(train), 1):.0f} {aucs[-1] if aucs else 0:.4f}")
PY
)
	echo "  $w worker(s): ${sps[$w]} samples/s, final AUC $auc"
	python3 -c "import sys; sys.exit(0 if $auc > 0.55 else 1)" || { echo "bench train: no learning with $w workers"; exit 1; }
done
python3 -c "print('bench train_local: 2 workers %d samples/s | 1 worker %d samples/s | ratio %.2f | (2 CPU cores: the workers share them)' % (${sps[2]}, ${sps[1]}, ${sps[2]} / ${sps[1]}))"
