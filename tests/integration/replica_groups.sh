#!/bin/bash
# replica_groups.sh - 2D training (replica groups) end to end with the real
# binaries in local mode: 2 groups of 2 workers with exact sync end where 4
# workers in 1D do; a world that grows by a replica group copies exactly one
# group's state (pre-copied while the world trains, and with pre-copy off),
# shrinking by one moves nothing, and the elastic runs end where the static
# one does; replicas averaged every K steps train through a growth (moved at
# the pause); bad replica_sync settings are refused by name.
# Every wait here is bounded.
set -u
. "$(dirname "$0")/../lib/itest.sh"

coord() { timeout 120 "$bin/rowshift-coordinator" --local "$@"; }
# dlrm-small at a quarter of its batch: parts 1 and 3 as fast as they train; parts 2 and 4 paced (25 ms a step),
# so that a pre-copy has steps to run its rounds beside, and a kill at a step lands well before the run's end
model=$tmp/quarter.json paced=$tmp/paced.json
quarter_config examples/dlrm-small.json "$model"
light_config examples/dlrm-small.json "$paced"

# 1. exact sync: 2 x 2 equals 1 x 4
coord --workers 4 --sharding-group 2 --config $model --steps 40 --save "$tmp/twod" \
	>"$tmp/twod.out" 2>"$tmp/twod.err"
check "a 2 x 2 run finishes" test $? = 0
check "it says it trains in 2 replica groups of 2" grep -q "generation 1: 4 workers in 2 replica groups of 2" "$tmp/twod.err"
coord --workers 4 --config $model --steps 40 --save "$tmp/oned" >/dev/null 2>&1
check "2 groups of 2 end with 1 x 4's bits, ZCH table included" bash -c \
	"'$bin/rowshiftctl' checkpoint diff '$tmp/oned' '$tmp/twod' | tail -n 1 | grep -qx identical"

# 2. elastic 2D: 2 x 2 -> 3 groups -> 2 x 2, every table of the demo model (deterministic training, the
# default, makes even the data-parallel table's all-reduce independent of the world size)
python3 -c "
import json; c = json.load(open('$paced'))
c['cluster'].update({'ranks_per_node': 6, 'sharding_group': 2})
json.dump(c, open('$tmp/groups.json', 'w'))"
coord --workers 4 --config "$tmp/groups.json" --steps 45 --schedule 15:6,30:4 --save "$tmp/elastic" \
	>"$tmp/elastic.out" 2>"$tmp/elastic.err"
check "a 2 x 2 -> 3 x 2 -> 2 x 2 run finishes" test $? = 0
check "each reshard moved exactly its plan diff" moved_is_plan_diff "$tmp/elastic.out" 2 may-be-empty
check "adding a group moves one group's state, its lower bound" python3 - "$tmp/elastic.out" <<'PY'
import re, sys
out = open(sys.argv[1]).read()
m = re.search(r'generation 2: 4 -> 6 workers in 3 replica groups of 2 at step 15; the plan moves ([\d.]+) MiB \(lower bound ([\d.]+) MiB\)', out)
print('growth:', m and m.groups())
sys.exit(0 if m and float(m.group(1)) > 0 and m.group(1) == m.group(2) else 1)
PY
check "removing a group moves nothing" grep -q \
	"generation 3: 6 -> 4 workers in 2 replica groups of 2 at step 30; the plan moves 0.00 MiB" "$tmp/elastic.out"
check "the growth was pre-copied while the 2D world trained (exact sync marks the rows it updates)" bash -c \
	"grep -q 'generation 2: staged .*pre-copied in [1-9][0-9]* rounds while training' $tmp/elastic.out &&
	 grep -q 'generation 2: pre-copied in .*\(; [1-9][0-9]* rows\|at the pause, [1-9][0-9]* (\)' $tmp/elastic.err"
coord --workers 4 --config "$tmp/groups.json" --steps 45 --save "$tmp/static" >/dev/null 2>&1
check "the elastic 2D run ends with the static run's bits" bash -c \
	"'$bin/rowshiftctl' checkpoint diff '$tmp/static' '$tmp/elastic' | tail -n 1 | grep -qx identical"
with_precopy "$tmp/groups.json" false "$tmp/groups-pause.json"
coord --workers 4 --config "$tmp/groups-pause.json" --steps 45 --schedule 15:6,30:4 --save "$tmp/elastic-pause" \
	>"$tmp/elastic-pause.out" 2>&1
check "with pre-copy off, its rows moved at the pause" bash -c "! grep -q 'pre-copied in' '$tmp/elastic-pause.out'"
check "and each reshard moved its plan diff" moved_is_plan_diff "$tmp/elastic-pause.out" 2 may-be-empty
check "and the run ends with the static run's bits" bash -c \
	"'$bin/rowshiftctl' checkpoint diff '$tmp/static' '$tmp/elastic-pause' | tail -n 1 | grep -qx identical"

# a world that turns 2D (3 workers, 1D, to 2 groups of 2) moves its rows at the pause, not pre-copied (such a
# copy failed its checksums), and commits at once
coord --workers 3 --config "$tmp/groups.json" --steps 40 --schedule 20:4 >"$tmp/to2d.out" 2>&1
check "3 (1D) -> 4 (2 groups of 2): moved at the pause, committed at the first attempt" bash -c \
	"grep -q 'generation 2: 3 -> 4 workers in 2 replica groups of 2' '$tmp/to2d.out' && grep -q 'generation 2 committed' '$tmp/to2d.out' &&
	 ! grep -q 'pre-copied in\|aborted' '$tmp/to2d.out'"

# 3. local SGD: replicas averaged every K steps trains to the end
python3 -c "
import json; c = json.load(open('$model'))
c['cluster'].update({'sharding_group': 2, 'replica_sync': {'every': 5}, 'ranks_per_node': 6})
json.dump(c, open('$tmp/every.json', 'w'))
c['cluster']['replica_sync'] = {'every': 0}
json.dump(c, open('$tmp/every0.json', 'w'))"
coord --workers 4 --config "$tmp/every.json" --steps 40 --schedule 20:6 --log-json "$tmp/every.log" >"$tmp/every.out" 2>&1
check "a run with replicas averaged every 5 steps finishes" grep -q '"step":40' "$tmp/every.log"
check "it grew by a group at step 20, its rows moved at the pause (averaging changes every row: no pre-copy)" bash -c \
	"grep -q 'generation 2 resumed at step 20' '$tmp/every.out' && ! grep -q 'pre-copied in' '$tmp/every.out'"
coord --workers 4 --config "$tmp/every0.json" --steps 40 >"$tmp/every0.out" 2>&1
check "replica_sync every 0 is refused, naming the field" grep -q "replica_sync.*every" "$tmp/every0.out"

# 4. a worker lost without warning in a 2 x 2 world heals from its replica: no rollback, no checkpoint read
heal_run() { # heal_run NAME FLAGS...: 2 x 2 to step 90 in the background
	local name=$1
	shift
	timeout 200 "$bin/rowshift-coordinator" --local --workers 4 --sharding-group 2 --config "$paced" \
		--steps 90 --save "$tmp/$name.final" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
	job=$!
}
healed() { # healed NAME: NAME's run healed from its replicas, no rollback (what it said, when not)
	grep -q "recovered: .*(healed from replicas" "$tmp/$1.out" && ! grep -q "rolling back" "$tmp/$1.out" && return 0
	grep -hE "recover|healing|caught up|lost at step|stopped at step" "$tmp/$1.out" "$tmp/$1.err"
	return 1
}
kill_workers() { # kill_workers N...: SIGKILL this job's worker-N (at once)
	for w in "$@"; do pkill -9 -P "$(pgrep -P $job)" -f -- "--name worker-$w "; done
}
heal_run hbase
wait $job
port=$(free_port)
heal_run heal1 --listen "127.0.0.1:$port" --admin-file "$tmp/heal1.admin"
wait_for "$tmp/heal1.out" "^step    40" 60
kill_workers 1
wait_for "$tmp/heal1.out" "^recovered:" 60
curl -s "http://127.0.0.1:$port/metrics" >"$tmp/heal.metrics"
"$bin/rowshiftctl" status --admin-file "$tmp/heal1.admin" >"$tmp/heal.status" 2>&1
wait $job
check "a SIGKILLed worker of a 2 x 2 world: the job finishes" test $? = 0
check "it heals from the replicas, no rollback" bash -c "grep -q 'recovery: worker-1 was lost holding a copy of rows of .*; rebuilding its rows from their replicas, no rollback' $tmp/heal1.out && ! grep -q 'rolling back' $tmp/heal1.out"
check "the survivors kept their models and the new worker-1 got its copy" bash -c \
	"grep -q 'keeping the model for the world to heal' $tmp/heal1.err && grep -q 'generation 2: staged and verified' $tmp/heal1.out"
check "recovered with no step lost" grep -q "recovered: generation 2 (4 workers) made step .*(healed from replicas, no step lost)" "$tmp/heal1.out"
check "rowshiftctl status shows it" grep -q "last recovery from replicas at step [0-9]*, no step lost: worker-1" "$tmp/heal.status"
check "/metrics counts it as a replica recovery" grep -q 'rowshift_recoveries_total{kind="replica"} 1' "$tmp/heal.metrics"
# Healed from replicas, the step the loss interrupted is trained again, and its ZCH lookups count twice
# in the LFU use counts (the eviction metadata): the values are compared, not those counts.
check "its final weights equal the undisturbed run's (every value)" same_values "$tmp/hbase.final" "$tmp/heal1.final"
# two workers of different groups and roles at once: every row still has a copy
heal_run heal2
wait_for "$tmp/heal2.out" "^step    40" 60
kill_workers 0 3
wait $job
check "two workers in different groups lost at once: the world heals" healed heal2
check "and ends with the undisturbed run's weights (every value)" same_values "$tmp/hbase.final" "$tmp/heal2.final"
# the last rank, back under its own name: the world looks the same but must still heal
heal_run heal3
wait_for "$tmp/heal3.out" "^step    40" 60
kill_workers 3
wait $job
check "the last rank lost: the world heals" healed heal3
check "and ends with the undisturbed run's weights (every value)" same_values "$tmp/hbase.final" "$tmp/heal3.final"
# both copies of one role lost: rows are gone, the world rolls back to its checkpoint
heal_run both --checkpoint-dir "$tmp/ck" --checkpoint-every 20
wait_for "$tmp/both.out" "checkpoint of step 40 complete" 60
kill_workers 0 1
wait $job
check "both copies of some rows lost: the world rolls back to a checkpoint" grep -q "rolling back to .*step-[0-9]* (step [1-9][0-9]*)" "$tmp/both.out"
check "and ends with the undisturbed run's weights, bit for bit" same_bits "$tmp/hbase.final" "$tmp/both.final"
# an old member lost during a pre-copy (a growth by a group; every reshard stalls 1.5 s first): the copy is
# called off, and the world heals with the joiners in, in one reshard, no rollback (--max-attempts 1: calling
# the copy off is not one of the heal's attempts)
ROWSHIFT_FAULT=stall-ms=1500 timeout 200 "$bin/rowshift-coordinator" --local --workers 4 --config "$tmp/groups.json" \
	--steps 90 --schedule 40:6 --max-attempts 1 --save "$tmp/pcheal.final" >"$tmp/pcheal.out" 2>"$tmp/pcheal.err" &
job=$!
wait_for "$tmp/pcheal.err" "worker-4 generation 2: pre-copy began" 60
kill_workers 1
wait $job
check "an old member lost during a 2D pre-copy: the copy is called off" \
	grep -q "generation 2 aborted: worker-1 was lost during the pre-copy" "$tmp/pcheal.out"
check "the world heals from the replicas, no rollback" healed pcheal
check "its survivors stopped at once (no peer waited out its timeout for a stopped one)" bash -c \
	"! grep -q 'timed out' '$tmp/pcheal.err'"
check "it ends on 6 workers" grep -q "training done: 6 workers, 90 steps" "$tmp/pcheal.out"
check "with the undisturbed run's weights (every value)" same_values "$tmp/hbase.final" "$tmp/pcheal.final"

finish_checks replica_groups
