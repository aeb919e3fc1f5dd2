#!/bin/bash
# bench_train.sh - training throughput of the demo model in local mode, with 1
# and 2 CPU worker processes on this machine (samples per second, as the
# workers report them; the reference is the 1-worker run of the same
# benchmark), then the cost of exact replica sync: 4 workers in 2 replica
# groups of 2 beside 4 workers in 1D, in the same run. Fails when a run
# fails or does not learn (final AUC <= 0.55).
set -u
BUILD=${BUILD:-build}
steps=200
[ "${1:-}" = "--quick" ] && steps=60
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
declare -A sps
run() { # run NAME WORKERS FLAGS...: sps[NAME] gets its training samples/s
	local name=$1 w=$2
	shift 2
	if ! RS_LOG_LEVEL=warn timeout 300 "$BUILD/bin/rowshift-coordinator" --local --workers $w \
		--config examples/dlrm-small.json --steps $steps --log-json "$tmp/$name.json" "$@" >/dev/null; then
		echo "bench train: the $name run failed"
		exit 1
	fi
	read -r sps[$name] auc < <(python3 - "$tmp/$name.json" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
train = [l["samples_per_s"] for l in lines if "auc" not in l][1:]  # reports without evaluation time, after warm-up
aucs = [l["auc"] for l in lines if "auc" in l]
print(f"{sum(train) / max(len(train), 1):.0f} {aucs[-1] if aucs else 0:.4f}")
PY
)
	echo "  $name ($w workers): ${sps[$name]} samples/s, final AUC $auc"
	python3 -c "import sys; sys.exit(0 if $auc > 0.55 else 1)" || { echo "bench train: no learning in the $name run"; exit 1; }
}
run 1 1
run 2 2
python3 -c "print('bench train_local: 2 workers %d samples/s | 1 worker %d samples/s | ratio %.2f | (2 CPU cores: the workers share them)' % (${sps[2]}, ${sps[1]}, ${sps[2]} / ${sps[1]}))"
run oned 4
run twod 4 --sharding-group 2
python3 -c "print('bench train_replica_sync: 2 replica groups of 2, exact sync, %d samples/s | 4 workers 1D %d samples/s | ratio %.2f | (4 workers on 2 CPU cores)' % (${sps[twod]}, ${sps[oned]}, ${sps[twod]} / ${sps[oned]}))"
