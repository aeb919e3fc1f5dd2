#!/bin/bash
# ctl_plan.sh - `rowshiftctl plan` as a user runs it: a fresh plan as JSON,
# an incremental one from it for one more rank with its moves written to a
# file (growing keeps every row in place but those the new rank takes, so
# every move goes to rank 2), and bad input refused with the file named: a damaged previous plan, a
# --moves file that cannot be written, a world out of range.
set -u
. "$(dirname "$0")/../lib/itest.sh"

ctl=$bin/rowshiftctl
model=examples/minimal.json

check "a fresh plan for 2 ranks, as JSON" bash -c \
	"'$ctl' plan --config $model --world 2 --json >$tmp/p2.json &&
	 python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); assert p[\"world\"][\"ranks\"] == 2' $tmp/p2.json"
"$ctl" plan --config $model --world 3 --previous "$tmp/p2.json" --moves "$tmp/moves.json" --json >"$tmp/p3.json"
check "2 -> 3 from it, the moves written to a file (exit $?)" test -s "$tmp/moves.json"
check "every move goes from an old rank to the new one, none is empty" python3 - "$tmp/moves.json" <<'PY'
import json, sys
moves = json.load(open(sys.argv[1]))["moves"]
assert moves, "no moves"
for m in moves:
    assert m["dst"] == 2 and m["src"] in (0, 1), m
    assert m["rows"] > 0 and m["cols"] > 0 and m["bytes"] > 0, m
PY
check "the moves file is mode 0644 and complete JSON" bash -c \
	"[ \"\$(stat -c %a $tmp/moves.json)\" = 644 ] && python3 -m json.tool $tmp/moves.json >/dev/null"

# bad input: refused, naming what
printf '{"world": {"ranks": 2}, "shards": [' >"$tmp/broken.json"
"$ctl" plan --config $model --world 3 --previous "$tmp/broken.json" >"$tmp/broken.out" 2>&1
rc=$?
check "a damaged previous plan is refused (exit $rc), naming the file" \
	bash -c "[ $rc -ne 0 ] && grep -q 'broken.json' '$tmp/broken.out'"
"$ctl" plan --config $model --world 3 --previous "$tmp/p2.json" --moves "$tmp/no/such/dir/m.json" >"$tmp/nodir.out" 2>&1
rc=$?
check "a --moves file that cannot be written fails (exit $rc), naming it" \
	bash -c "[ $rc -eq 1 ] && grep -q 'no/such/dir/m.json' '$tmp/nodir.out'"
"$ctl" plan --config $model --world 0 >"$tmp/w0.out" 2>&1
rc=$?
check "--world 0 is refused (exit $rc)" bash -c "[ $rc -ne 0 ] && [ -s '$tmp/w0.out' ]"

finish_checks ctl_plan
