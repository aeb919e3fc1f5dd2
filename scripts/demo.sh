#!/bin/bash
# demo.sh - `make demo`. Today it shows the planner on the demo model: a plan
# for 2 workers, then live-style replans 2 -> 4 -> 3 with the rows that move.
# It becomes the training demo (local coordinator, CPU workers, scaling
# mid-run) when the worker lands.
set -euo pipefail
BUILD=${BUILD:-build}
ctl=$BUILD/bin/rowshiftctl
cfg=examples/dlrm-small.json
out=$BUILD/demo
mkdir -p "$out"

echo "== plan for 2 workers"
"$ctl" plan --config "$cfg" --world 2
"$ctl" plan --config "$cfg" --world 2 --json > "$out/plan2.json"

echo
echo "== scale 2 -> 4: replan from the 2-worker plan"
"$ctl" plan --config "$cfg" --world 4 --previous "$out/plan2.json" --moves "$out/moves-2-4.json"
"$ctl" plan --config "$cfg" --world 4 --previous "$out/plan2.json" --json > "$out/plan4.json"
python3 - "$out/moves-2-4.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for mv in m["moves"]:
    print(f'  move {mv["table"]:>12} rows {mv["row_offset"]}..{mv["row_offset"] + mv["rows"] - 1}'
          f' cols {mv["col_offset"]}..{mv["col_offset"] + mv["cols"] - 1}: rank {mv["src"]} -> {mv["dst"]} ({mv["bytes"]} bytes)')
print(f'  {len(m["moves"])} moves, {m["bytes"]} bytes')
PY

echo
echo "== scale 4 -> 3 (the highest rank leaves)"
"$ctl" plan --config "$cfg" --world 3 --previous "$out/plan4.json"
echo
echo "(training workers and live migration are not built yet: see README, Status)"
