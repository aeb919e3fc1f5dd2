#!/bin/bash
# dashboard.sh - the coordinator's dashboard in a real browser (headless
# Debian chromium via playwright-core, see tests/integration/dashboard.mjs)
# against a live local job: after a 2 -> 4 reshard, and again after 4 -> 3,
# the page shows the members and the shard map the coordinator reports;
# the 2 -> 4 reshard is pre-copied (the default): the status stream shows
# its rows moving while the phase is training, each member's rounds done,
# and the page draws such a message as a pre-copy and clears it when told
# the attempt is over; after a worker is SIGKILLed and the world rolled
# back, the header says so. Screenshots go to $BUILD/dashboard-*.png.
set -u
. "$(dirname "$0")/../lib/itest.sh"
light=$tmp/light.json # a lighter dlrm-small: these jobs train until stopped
light_config examples/dlrm-small.json "$light"
[ -f tools/node_modules/playwright-core/package.json ] || { echo "FAILED: playwright-core is not installed (make tools)"; exit 1; }
rm -f "$BUILD"/dashboard-*.png # this run's screenshots, not an earlier one's
port=$(free_port)
"$bin/rowshift-coordinator" --local --workers 2 --config "$light" --steps 100000 --schedule 80:4 \
	--listen 127.0.0.1:$port --admin-file "$tmp/admin.json" >"$tmp/run.out" 2>"$tmp/run.err" &
job=$!
wait_for "$tmp/admin.json" url 30
timeout 120 "$bin/rowshiftctl" status --watch --json --admin-file "$tmp/admin.json" >"$tmp/stream.json" 2>/dev/null &
watch=$!
timeout 120 "$bin/rowshiftctl" status --watch --admin-file "$tmp/admin.json" >"$tmp/watch.txt" 2>/dev/null &
watch_text=$!
wait_for "$tmp/run.out" "resumed at step 80" 60
kill $watch $watch_text 2>/dev/null
check "rowshiftctl status --watch draws the copy as a pre-copy" grep -q "pre-copying rows for generation 2: .*, 4 of 4 members done" "$tmp/watch.txt"
check "the stream shows the 2 -> 4 rows moving while training, and every member's rounds done" \
	python3 - "$tmp/stream.json" "$tmp/precopy.json" <<'PY'
import json, sys
phase, seen = None, []
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m["type"] in ("snapshot", "phase"):
        phase = m["phase"]
    if m["type"] == "migration" and m["precopy"] and m["generation"] == 2:
        seen.append((phase, m))
assert seen, "no pre-copy migration message for generation 2"
done = [m for p, m in seen if p == "training" and m["precopied"] == m["members"] == 4]
assert done, ("no message while training with all 4 members' rounds done", [(p, m["precopied"]) for p, m in seen])
json.dump(done[-1], open(sys.argv[2], "w"))
PY
[ -s "$tmp/precopy.json" ] || echo '{}' >"$tmp/precopy.json" # none to draw: the page check below fails, saying so
"$bin/rowshiftctl" status --json --admin-file "$tmp/admin.json" >"$tmp/snap4.json"
timeout 120 node tests/integration/dashboard.mjs "http://127.0.0.1:$port/" "$tmp/snap4.json" "$BUILD/dashboard-4.png" 4 "" \
	"$tmp/precopy.json"
check "the dashboard shows the 4 members and the shard map of the plan, and draws a pre-copy's progress" test $? = 0
"$bin/rowshiftctl" scale --workers 3 --admin-file "$tmp/admin.json" >/dev/null
wait_for "$tmp/run.out" "generation 3 resumed" 60
"$bin/rowshiftctl" status --json --admin-file "$tmp/admin.json" >"$tmp/snap3.json"
timeout 120 node tests/integration/dashboard.mjs "http://127.0.0.1:$port/" "$tmp/snap3.json" "$BUILD/dashboard-3.png" 3
check "after scaling to 3, it shows the 3 members and the new shard map" test $? = 0
pkill -9 -P $job -f -- "--name worker-1 "
wait_for "$tmp/run.out" "^recovered:" 60
"$bin/rowshiftctl" status --json --admin-file "$tmp/admin.json" >"$tmp/snapr.json"
timeout 120 node tests/integration/dashboard.mjs "http://127.0.0.1:$port/" "$tmp/snapr.json" "$BUILD/dashboard-recovered.png" 3 \
	"last recovery: back to step 0"
check "after worker-1 was SIGKILLed, it shows the last recovery (no checkpoints: back to step 0) and the 3 members" test $? = 0
check "the screenshots were saved" test -s "$BUILD/dashboard-4.png" -a -s "$BUILD/dashboard-3.png"
kill $job; wait $job 2>/dev/null
echo "dashboard: $fails failed"
[ "$fails" = 0 ]
