#!/bin/bash
# demo.sh - `make demo`: the main job on one machine. A local coordinator
# starts two CPU worker processes, hands them the sharding plan over its
# control channel, and they train the demo model (every sharding type and a
# ZCH table) while the coordinator prints loss, held-out AUC and throughput.
# At step 50 the job grows to 4 workers and at step 120 shrinks to 3, live:
# the workers move only the rows the plan diff names and resume at the same
# step. The moves of each reshard are listed at the end.
set -euo pipefail
BUILD=${BUILD:-build}
cfg=examples/dlrm-small.json
out=$BUILD/demo
mkdir -p "$out"

echo "== training $cfg on 2 local CPU workers; 4 workers from step 50, 3 from step 120"
RS_LOG_LEVEL=${RS_LOG_LEVEL:-warn} "$BUILD/bin/rowshift-coordinator" --local --workers 2 --config "$cfg" \
	--steps 200 --schedule 50:4,120:3 --log-json "$out/progress.json"

echo
echo "== what those reshards moved (the plan diffs, per table)"
ctl=$BUILD/bin/rowshiftctl
"$ctl" plan --config "$cfg" --world 2 --json > "$out/plan2.json"
"$ctl" plan --config "$cfg" --world 4 --previous "$out/plan2.json" --json --moves "$out/moves-2-4.json" > "$out/plan4.json"
"$ctl" plan --config "$cfg" --world 3 --previous "$out/plan4.json" --moves "$out/moves-4-3.json" >/dev/null
python3 - "$out/moves-2-4.json" "$out/moves-4-3.json" <<'PY'
import json, sys
for path, what in zip(sys.argv[1:], ("2 -> 4", "4 -> 3")):
    m = json.load(open(path))
    tables = sorted({mv["table"] for mv in m["moves"]})
    print(f'{what}: {len(m["moves"])} moves, {m["bytes"] / 2**20:.2f} MiB ({", ".join(tables)})')
PY
