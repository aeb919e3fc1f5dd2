#!/bin/bash
# coordinator_restart.sh - what a coordinator's restart must withstand, with
# the real binaries in local mode (each job --state, restarted with --state):
#   1. a listener squatting on the coordinator's port while it is down gets
#      the workers' rejoins and learns nothing that lets it join: the join
#      token is in none of them, a captured join replayed to the real
#      coordinator is refused, and the workers, refused by an impostor that
#      cannot prove itself, wait for the real coordinator and carry on;
#   2. a worker killed while the coordinator was down (its peer then drops
#      the generation) is not taken for the original when it is started
#      again (its incarnation is new): the restarted coordinator names the
#      rows that were lost and rolls the world back (no checkpoints here:
#      to step 0), instead of training on with a hole or waiting forever;
#   3. a worker's pid in the state file is now someone else's (a
#      bystander): the job recovers the same way, and the bystander,
#      adopted as a worker by pid, is never signalled;
#   4. with periodic checkpoints, the same loss rolls the world back to the
#      newest one, though the state was last saved when the generation
#      began at step 0 (it records how far the job reached before each
#      checkpoint completes), not to the start; an earlier run's
#      checkpoint of a later step in the same directory is neither taken
#      nor kept in place of this run's;
#   5. the same loss with "recovery": "partial": the restarted coordinator
#      restores only the lost rows from the newest checkpoint, no rollback;
#   6. a job that is done is not trained again: started again on its state,
#      the coordinator says so and exits 0, and starts no worker, saves no
#      checkpoint and leaves the state as it is; asked for more steps, it
#      refuses (exit 2);
#   7. a job's state, its model config changed since (the same file):
#      refused at once, naming the section that differs.
set -u
. "$(dirname "$0")/../lib/itest.sh"
cfg=$tmp/dlrm-small.json
light_config examples/dlrm-small.json $cfg 10 # a quarter of the batch, steps of at least 10 ms

# begin NAME PORT [FLAGS...]: a long job of 2 workers on PORT, its state in $tmp/NAME.state; its pid in $coord
begin() {
	local name=$1 port=$2
	shift 2
	"$bin/rowshift-coordinator" --local --workers 2 --config $cfg --steps 100000 --listen 127.0.0.1:$port \
		--state "$tmp/$name.state" --grace-ms 30000 --admin-file "$tmp/$name.admin" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
	coord=$!
	wait_for "$tmp/$name.out" "^step " 60
}
# again NAME RUN: the coordinator of NAME started again on its state (output in $tmp/RUN.*); its pid in $coord
again() {
	"$bin/rowshift-coordinator" --local --state "$tmp/$1.state" --timeout-ms 5000 --admin-file "$tmp/$2.admin" \
		>"$tmp/$2.out" 2>"$tmp/$2.err" &
	coord=$!
}
workers_of() { pgrep -f "[r]owshift-worker --coordinator ws://127.0.0.1:$1 " | wc -l; }
end_workers() { pkill -9 -f "[r]owshift-worker --coordinator ws://127.0.0.1:$1 "; }

# 1. an impostor on the port
port=$(free_port)
begin one $port
token=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["token"])' "$tmp/one.admin")
kill -9 $coord
{ wait $coord; } 2>/dev/null
# until each worker was refused 3 times and 2 s have passed (at most 30 s)
timeout 40 python3 tests/integration/fake_coordinator.py $port 30 "$tmp/captured.txt" 2 3 2
check "1. the impostor got both workers' rejoins" bash -c \
	"grep -q '\"worker\": *\"worker-0\"' '$tmp/captured.txt' && grep -q '\"worker\": *\"worker-1\"' '$tmp/captured.txt'"
check "1. the join token is in none of them" bash -c "! grep -qF '$token' '$tmp/captured.txt'"
check "1. refused by an impostor, both workers wait for the real coordinator" test "$(workers_of $port)" = 2
again one one-again
check "1. both workers rejoined the real coordinator" bash -c \
	"for _ in \$(seq 1 600); do grep -q 'worker-0 joined' '$tmp/one-again.err' && grep -q 'worker-1 joined' '$tmp/one-again.err' && exit 0; nap 0.05; done; exit 1"
check "1. they were the same workers (no replacement, no recovery)" bash -c "! grep -q '^recovery: ' '$tmp/one-again.out'"
grep '"type": *"join"' "$tmp/captured.txt" | head -1 >"$tmp/replay.txt"
timeout 30 python3 - $port "$tmp/replay.txt" >"$tmp/replay.out" 2>&1 <<'PY'
import sys
sys.path.insert(0, "tests/integration")
import wslib
port, captured = int(sys.argv[1]), open(sys.argv[2]).read().strip().encode()
s, rest = wslib.connect(port, "rowshift-control")
r = wslib.Reader(s, rest)
r.next(10)  # the real coordinator's challenge
wslib.send(s, captured)
print(r.next(10))
PY
check "1. a captured join replayed to the real coordinator is refused" grep -q "bad join token" "$tmp/replay.out"
n=$(grep -c "^step " "$tmp/one-again.out")
check "1. training goes on" bash -c \
	"for _ in \$(seq 1 600); do [ \$(grep -c '^step ' '$tmp/one-again.out') -gt $n ] && exit 0; nap 0.05; done; exit 1"
kill -9 $coord
end_workers $port

# 2. a worker killed while the coordinator was down, and started again by the next one (no checkpoints: to step 0)
port=$(free_port)
begin two $port
kill -9 $coord
{ wait $coord; } 2>/dev/null
pkill -9 -f "[r]owshift-worker --coordinator ws://127.0.0.1:$port .*--name worker-1 "
again two two-again
wait_for "$tmp/two-again.out" "^recovered: " 60
check "2. the restarted coordinator rolls the world back, naming a worker lost with its rows" \
	grep -q "recovery: worker-[01] .*holding the only copy of rows.*rolling back to the start (step 0)" "$tmp/two-again.out"
check "2. and the world trains again" grep -q "^recovered: generation [0-9]* ([12] workers\?) made step" "$tmp/two-again.out"
check "2. worker-1's replacement joins the world, as a fresh worker" wait_for "$tmp/two-again.out" \
	"committed: 1 -> 2 workers\|^recovered: generation [0-9]* (2 workers)" 60
kill -9 $coord
end_workers $port

# 3. a recorded pid reused by a bystander
port=$(free_port)
begin three $port
kill -9 $coord
{ wait $coord; } 2>/dev/null
pkill -9 -f "[r]owshift-worker --coordinator ws://127.0.0.1:$port .*--name worker-1 "
sleep 300 &
bystander=$!
python3 - "$tmp/three.state" $bystander <<'PY'
import json, sys
path, pid = sys.argv[1], int(sys.argv[2])
s = json.load(open(path))
for w in s["job"]["workers"]:
    if w["name"] == "worker-1":
        w["pid"] = pid
json.dump(s, open(path, "w"))
PY
again three three-again
wait_for "$tmp/three-again.out" "^recovered: " 60
check "3. the job recovers, naming the lost rows" grep -q "recovery: worker-[01] .*holding the only copy of rows" "$tmp/three-again.out"
kill -9 $coord
check "3. the bystander holding worker-1's old pid was never signalled" kill -0 $bystander
kill $bystander
end_workers $port

# 4. the same with checkpoints, beside an earlier run's of a later step
port=$(free_port)
mkdir -p "$tmp/ck4/step-000900000" # an earlier run's: complete (its index is what counts), far ahead
echo '{}' >"$tmp/ck4/step-000900000/index.json"
begin four $port --checkpoint-dir "$tmp/ck4" --checkpoint-every 20
wait_for "$tmp/four.out" "checkpoint of step 120 complete" 60
sleep 0.2 # its pruning follows the line
# the job trains on meanwhile: for a moment after each newer checkpoint's index lands, before the pruning that
# follows it, there are 3 of its own (1 if the earlier run's took the place of one of them)
check "4. the job's own newest 2 complete checkpoints (--checkpoint-keep) are kept beside the earlier run's" bash -c \
	"n=\$(cd '$tmp/ck4' && ls -d step-*/index.json 2>/dev/null | grep -vc step-000900000)
	 [ \$n = 2 -o \$n = 3 ] && [ -e '$tmp/ck4/step-000900000/index.json' ] || { echo \"\$n of its own\"; ls '$tmp/ck4'; false; }"
kill -9 $coord
{ wait $coord; } 2>/dev/null
newest=$(cd "$tmp/ck4" && ls -d step-*/index.json | grep -v step-000900000 | sort | tail -1 | cut -d/ -f1) # complete
pkill -9 -f "[r]owshift-worker --coordinator ws://127.0.0.1:$port .*--name worker-1 "
again four four-again
wait_for "$tmp/four-again.out" "^recovered: " 60
check "4. the restarted coordinator rolls back to the newest checkpoint ($newest), not to the start" \
	grep -q "recovery: worker-[01] .*rolling back to .*/$newest (step $((10#${newest#step-})))" "$tmp/four-again.out"
check "4. the earlier run's checkpoint is left as it was" test -e "$tmp/ck4/step-000900000/index.json"
kill -9 $coord
end_workers $port

# 5. partial recovery after a restart
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c.setdefault("cluster", {})["recovery"] = "partial"
json.dump(c, open(sys.argv[2], "w"))' $cfg "$tmp/partial.json"
port=$(free_port)
cfg=$tmp/partial.json begin five $port --checkpoint-dir "$tmp/ck5" --checkpoint-every 20
wait_for "$tmp/five.out" "checkpoint of step 100 complete" 60
kill -9 $coord
{ wait $coord; } 2>/dev/null
pkill -9 -f "[r]owshift-worker --coordinator ws://127.0.0.1:$port .*--name worker-1 "
again five five-again
wait_for "$tmp/five-again.out" "^recovered: " 60
check "5. the restarted coordinator restores worker-1's rows from a checkpoint of step 100 or later, no rollback" \
	grep -q "^recovered: .*(partial: [0-9]* stale rows restored from step [1-9][0-9][0-9]," "$tmp/five-again.out"
kill -9 $coord
end_workers $port

# 6. started again on the state of a job that is done
port=$(free_port)
six=(--local --workers 2 --config $cfg --steps 30 --listen 127.0.0.1:$port --state "$tmp/six.state"
	--checkpoint-dir "$tmp/ck6" --checkpoint-every 10 --admin-file "$tmp/six.admin")
timeout 120 "$bin/rowshift-coordinator" "${six[@]}" >"$tmp/six.out" 2>"$tmp/six.err"
check "6. the job of 30 steps ends (exit $?)" grep -q "^training done: 2 workers, 30 steps" "$tmp/six.out"
before=$(cd "$tmp" && find ck6 six.state -printf '%p %s %T@\n' | sort | md5sum)
timeout 60 "$bin/rowshift-coordinator" "${six[@]}" >"$tmp/six-again.out" 2>"$tmp/six-again.err" # the same command
rc=$?
check "6. started again with the same command, the coordinator says the job is done and exits 0 (exit $rc)" \
	bash -c "[ $rc = 0 ] && grep -q 'the job of .*six.state is done (30 steps): nothing to train' '$tmp/six-again.err'"
check "6. it started no worker and trained no step" \
	bash -c "[ \$(pgrep -fc '[r]owshift-worker --coordinator ws://127.0.0.1:$port ') = 0 ] && ! grep -q '^step \|joined' '$tmp/six-again.out' '$tmp/six-again.err'"
longer=("${six[@]}")
longer[6]=60 # --steps 60: to train more, which a done job does not
timeout 60 "$bin/rowshift-coordinator" "${longer[@]}" >"$tmp/six-longer.out" 2>"$tmp/six-longer.err"
rc=$?
check "6. with --steps 60 instead, it refuses (exit $rc): the job is done, its 30 steps trained" \
	bash -c "[ $rc = 2 ] && grep -q -- '--steps 60, but the job of .*six.state is done, its 30 steps trained' '$tmp/six-longer.err'"
check "6. its checkpoints and its state are as they were" \
	test "$(cd "$tmp" && find ck6 six.state -printf '%p %s %T@\n' | sort | md5sum)" = "$before"

# 7. started again on a job's state after its model config changed (the same file, another seed): refused, saying so
cp "$tmp/five.state" "$tmp/seven.state"
python3 - "$tmp/seven.state" <<'PY'
import json, sys
path = json.load(open(sys.argv[1]))["job"]["config"]
c = json.load(open(path))
c.setdefault("train", {})["seed"] = c["train"].get("seed", 42) + 1
json.dump(c, open(path, "w"))
PY
timeout 30 "$bin/rowshift-coordinator" --local --state "$tmp/seven.state" --timeout-ms 5000 \
	--admin-file "$tmp/seven.admin" >"$tmp/seven.out" 2>"$tmp/seven.err"
rc=$?
check "7. with its model config changed, the job's state is refused (exit $rc), naming the section, and no worker started" \
	bash -c "[ $rc = 1 ] && grep -q 'the job was started with another model config (it differs from .* in train)' '$tmp/seven.err' &&
		 ! grep -q 'joined' '$tmp/seven.err'"

finish_checks coordinator_restart
