#!/bin/bash
# replica_groups.sh - 2D training (replica groups) end to end with the real
# binaries in local mode: 2 groups of 2 workers with exact sync end where 4
# workers in 1D do; a world that grows by a replica group copies exactly one
# group's state, shrinking by one moves nothing, and the elastic run ends
# where the static one does; bad replica_sync settings are refused by name.
# Every wait here is bounded.
set -u
. "$(dirname "$0")/../lib/itest.sh"

coord() { timeout 120 "$bin/rowshift-coordinator" --local "$@"; }

# 1. exact sync: 2 x 2 equals 1 x 4
coord --workers 4 --sharding-group 2 --config examples/dlrm-small.json --steps 40 --save "$tmp/twod" \
	>"$tmp/twod.out" 2>"$tmp/twod.err"
check "a 2 x 2 run finishes" test $? = 0
check "it says it trains in 2 replica groups of 2" grep -q "generation 1: 4 workers in 2 replica groups of 2" "$tmp/twod.err"
coord --workers 4 --config examples/dlrm-small.json --steps 40 --save "$tmp/oned" >/dev/null 2>&1
check "2 groups of 2 end with 1 x 4's weights, ZCH table included (max_rel <= 1e-5)" \
	"$bin/rowshiftctl" checkpoint diff "$tmp/oned" "$tmp/twod" --max-rel 1e-5

# 2. elastic 2D: 2 x 2 -> 3 groups -> 2 x 2. The data-parallel table is left out: its all-reduce
# adds in an order that depends on the world size (issue 18), which no layout change can fix.
python3 -c "
import json; c = json.load(open('examples/dlrm-small.json'))
c['tables'] = [t for t in c['tables'] if t.get('sharding') != 'data_parallel']
c['cluster'].update({'ranks_per_node': 6, 'sharding_group': 2})
json.dump(c, open('$tmp/groups.json', 'w'))"
coord --workers 4 --config "$tmp/groups.json" --steps 45 --schedule 15:6,30:4 --save "$tmp/elastic" \
	>"$tmp/elastic.out" 2>"$tmp/elastic.err"
check "a 2 x 2 -> 3 x 2 -> 2 x 2 run finishes" test $? = 0
check "each reshard moved exactly its plan diff" python3 - "$tmp/elastic.out" <<'PY'
import re, sys
pairs = re.findall(r'staged and verified: moved .*?\((\d+) B; the plan diff: (\d+) B\)', open(sys.argv[1]).read())
print('moved and plan diff, per reshard:', pairs)
sys.exit(0 if len(pairs) == 2 and all(a == b for a, b in pairs) else 1)
PY
check "adding a group moves one group's state, its lower bound" python3 - "$tmp/elastic.out" <<'PY'
import re, sys
out = open(sys.argv[1]).read()
m = re.search(r'generation 2: 4 -> 6 workers in 3 replica groups of 2 at step 15; the plan moves ([\d.]+) MiB \(lower bound ([\d.]+) MiB\)', out)
print('growth:', m and m.groups())
sys.exit(0 if m and float(m.group(1)) > 0 and m.group(1) == m.group(2) else 1)
PY
check "removing a group moves nothing" grep -q \
	"generation 3: 6 -> 4 workers in 2 replica groups of 2 at step 30; the plan moves 0.00 MiB" "$tmp/elastic.out"
coord --workers 4 --config "$tmp/groups.json" --steps 45 --save "$tmp/static" >/dev/null 2>&1
check "the elastic 2D run ends with the static run's weights (max_rel <= 1e-5)" \
	"$bin/rowshiftctl" checkpoint diff "$tmp/static" "$tmp/elastic" --max-rel 1e-5

# 3. local SGD: replicas averaged every K steps trains to the end
python3 -c "
import json; c = json.load(open('examples/dlrm-small.json'))
c['cluster'].update({'sharding_group': 2, 'replica_sync': {'every': 5}})
json.dump(c, open('$tmp/every.json', 'w'))
c['cluster']['replica_sync'] = {'every': 0}
json.dump(c, open('$tmp/every0.json', 'w'))"
coord --workers 4 --config "$tmp/every.json" --steps 40 --log-json "$tmp/every.log" >"$tmp/every.out" 2>&1
check "a run with replicas averaged every 5 steps finishes" grep -q '"step":40' "$tmp/every.log"
coord --workers 4 --config "$tmp/every0.json" --steps 40 >"$tmp/every0.out" 2>&1
check "replica_sync every 0 is refused, naming the field" grep -q "replica_sync.*every" "$tmp/every0.out"

finish_checks replica_groups
