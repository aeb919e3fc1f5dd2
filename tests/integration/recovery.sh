#!/bin/bash
# recovery.sh - a worker lost without warning (SIGKILL: the OOM killer, a
# spot reclaim) does not end the job. Its peers drop the generation, the
# coordinator restarts the ordinal and rolls the world back to the latest
# complete checkpoint by itself; the job ends with the weights of an
# undisturbed run (the data is addressed by global sample index).
#   1. undisturbed: 3 workers, 120 steps (dlrm-small, its ZCH table too)
#   2. worker-1 SIGKILLed after the checkpoint of step 60 completed: the
#      world goes back to step 60 and finishes, equal to (1); the recovery
#      is on stdout, in --log-json and in /metrics
#   3. a flipped byte in that newest checkpoint, then a SIGKILL: its
#      checksum gives it away and the one before (step 30) is used; equal
#   4. a SIGKILL while every worker writes the checkpoint of step 60 (the
#      writers stall after their first file): it never completes and is
#      never used; back to step 30; equal
#   5. no checkpoints: back to step 0; equal
#   6. two workers SIGKILLed at once (a node with two of them): back to
#      step 60; equal
#   7. a SIGKILL of an old member during a reshard's migration: the attempt
#      aborts and the world rolls back; the job finishes
#   7b. the same during a pre-copy (an old member SIGKILLed while the world
#      trains beside the background copy): the world rolls back, the copy
#      with it, and the job ends equal to (1) within 1e-5 (4 workers)
#   8. "recovery": "partial" (CPR): worker-1 exits right after the
#      checkpoint of step 60 completed: only its rows come back from that
#      checkpoint, the survivors keep theirs, no step trained again; the
#      stale rows reported are the ones it held, and the final weights equal
#      (1) (nothing was stale); then a SIGKILL later than a checkpoint: the
#      job finishes with the rows it restored some steps old
#   9. worker-1 lost after the last step and the final save, before it says
#      "done": the job is complete (no recovery of a world whose other
#      members finished and exited), its saved weights equal (1)
set -u
. "$(dirname "$0")/../lib/itest.sh"

# dlrm-small at a quarter of its batch, each step at least 10 ms (light_config). A kill aimed between the
# checkpoints of steps 60 and 90 has the steps between them and the 1.5 s that the writers of step 90 stall
# for (hold90), whatever the machine's load.
cfg=$tmp/dlrm-small.json
hold90=checkpoint-stall-ms=1500@90
light_config examples/dlrm-small.json "$cfg" 10
run() { # run NAME FLAGS...: a local job of 3 workers to step 120, saved to $tmp/NAME.final, in the background
	local name=$1
	shift
	timeout 200 "$bin/rowshift-coordinator" --local --workers 3 --config "$cfg" --steps 120 \
		--save "$tmp/$name.final" --admin-file "$tmp/$name.admin" --log-json "$tmp/$name.jsonl" "$@" \
		>"$tmp/$name.out" 2>"$tmp/$name.err" &
	coord=$!
}
kill_worker() { # kill_worker N: SIGKILL this job's worker-N (other tests' workers have the same names)
	pkill -9 -P "$(pgrep -P $coord)" -f -- "--name worker-$1 "
}
finished() { # finished NAME: the job ended well
	wait $coord
	local rc=$?
	check "$1: the job finishes (exit $rc)" test "$rc" = 0
}
equal() { # equal NAME: its final weights are the undisturbed run's
	check "$1: its final weights equal the undisturbed run's, bit for bit" same_bits "$tmp/base.final" "$tmp/$1.final"
}
rolled_back_to() { # rolled_back_to NAME STEP: the one recovery went back to STEP
	check "$1: the world rolled back to step $2" grep -q "recovery: worker-1 .*; rolling back to .*(step $2)" "$tmp/$1.out"
	check "$1: and trained again from there" grep -q "recovered: generation 2 (3 workers) made step $(($2 + 1))," "$tmp/$1.out"
}

# 1. undisturbed
run base
finished base

# 2. SIGKILL after a checkpoint completed
port=$(free_port)
ROWSHIFT_FAULT=$hold90 run kill --checkpoint-dir "$tmp/ck2" --checkpoint-every 30 --listen "127.0.0.1:$port"
wait_for "$tmp/kill.out" "checkpoint of step 60 complete" 60
kill_worker 1
wait_for "$tmp/kill.out" "^recovered:" 60
curl -s "http://127.0.0.1:$port/metrics" >"$tmp/metrics.txt"
"$bin/rowshiftctl" status --admin-file "$tmp/kill.admin" >"$tmp/kill.status" 2>&1
finished kill
rolled_back_to kill 60
check "kill: the reason names the worker, how it went and the rows it held" \
	grep -q "recovery: worker-1 was lost holding the only copy of rows of 'item'" "$tmp/kill.out"
check "kill: the survivors dropped the generation instead of exiting" \
	bash -c "[ \$(grep -c 'generation 1 lost at step .*waiting for the coordinator to recover' '$tmp/kill.err') = 2 ]"
check "kill: --log-json has the recovery, begun and done" bash -c \
	"grep -q '\"event\":\"recovering\",\"kind\":\"rollback\".*\"to_step\":60' '$tmp/kill.jsonl' &&
	 grep -q '\"event\":\"recovered\",\"kind\":\"rollback\".*\"seconds\"' '$tmp/kill.jsonl'"
check "kill: /metrics counts it" grep -q '^rowshift_recoveries_total{kind="rollback"} 1$' "$tmp/metrics.txt"
check "kill: rowshiftctl status shows it" grep -q "last recovery: back to step 60 from step .*: worker-1 was lost" "$tmp/kill.status"
equal kill

# 3. the newest checkpoint damaged, then a SIGKILL (the workers frozen meanwhile: on a loaded machine, the
# world trained on to step 90's checkpoint while the byte was flipped)
ROWSHIFT_FAULT=$hold90 run flip --checkpoint-dir "$tmp/ck3" --checkpoint-every 30
wait_for "$tmp/flip.out" "checkpoint of step 60 complete" 60
workers=$(pgrep -P "$(pgrep -P $coord)")
kill -STOP $workers
shard=$(ls "$tmp/ck3/step-000000060/"*.safetensors | head -1)
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(-3, 2); b = f.read(1); f.seek(-3, 2); f.write(bytes([b[0] ^ 0x10]))' "$shard"
kill_worker 1
kill -CONT $workers 2>/dev/null # (worker-1 is gone)
finished flip
rolled_back_to flip 30
check "flip: the damaged checkpoint was passed over, naming its file" \
	grep -q "step-000000060.*$(basename "$shard")" "$tmp/flip.err"
equal flip

# 4. a SIGKILL while the checkpoint of step 60 is being written
ROWSHIFT_FAULT=checkpoint-stall-ms=2000@60 run midwrite --checkpoint-dir "$tmp/ck4" --checkpoint-every 30
wait_for "$tmp/midwrite.out" "checkpoint of step 30 complete" 60
for _ in $(seq 1 200); do [ -n "$(ls "$tmp/ck4/step-000000060" 2>/dev/null)" ] && break; nap 0.05; done
check "midwrite: the checkpoint of step 60 was being written, without its index" \
	bash -c "[ -n \"\$(ls '$tmp/ck4/step-000000060')\" ] && [ ! -e '$tmp/ck4/step-000000060/index.json' ]"
kill_worker 1
finished midwrite
rolled_back_to midwrite 30
check "midwrite: the checkpoint of step 60 was complete only once written again" \
	bash -c "[ \$(grep -c 'checkpoint of step 60 complete' '$tmp/midwrite.out') = 1 ]"
equal midwrite

# 5. no checkpoints
run nockpt
wait_for "$tmp/nockpt.out" "step    60" 60
kill_worker 1
finished nockpt
rolled_back_to nockpt 0
equal nockpt

# 6. two at once
ROWSHIFT_FAULT=$hold90 run two --checkpoint-dir "$tmp/ck6" --checkpoint-every 30
wait_for "$tmp/two.out" "checkpoint of step 60 complete" 60
pkill -9 -P "$(pgrep -P $coord)" -f -- "--name worker-[12] "
finished two
check "two: one recovery, back to step 60" bash -c \
	"[ \$(grep -c '^recovery: ' '$tmp/two.out') = 1 ] && grep -q '^recovery: .*(step 60)$' '$tmp/two.out'"
equal two

# 7. a SIGKILL of an old member while a reshard moves rows at the pause (pre-copy off; every reshard stalls 2 s first)
with_precopy "$cfg" false "$tmp/stw.json"
cfg=$tmp/stw.json ROWSHIFT_FAULT=stall-ms=2000 run migrate --checkpoint-dir "$tmp/ck7" --checkpoint-every 30 --schedule 45:4
wait_for "$tmp/migrate.out" "generation 2: 3 -> 4 workers" 60
kill_worker 1 # at once: the stall is 2 s; waiting for step 30's checkpoint too lost the race on a loaded machine
finished migrate
check "migrate: the loss during the migration was seen as one" \
	grep -q "recovery: worker-1 was lost during the migration .*; rolling back to" "$tmp/migrate.out"
# step 30's checkpoint may still have been written when worker-1 died: the world goes back to it, or to the
# start when it was not yet complete (not reported before the loss)
check "migrate: it rolled the world back to step 30's checkpoint, or to the start before it was complete" bash -c "awk '
	/^checkpoint of step 30 complete/ { done = 1 }
	/^recovery: / { ok = index(\$0, \"(step 30)\") || (!done && index(\$0, \"the start (step 0)\")); exit }
	END { exit !ok }' '$tmp/migrate.out'"
check "migrate: the job ended on 4 workers" grep -q "training done: 4 workers, 120 steps" "$tmp/migrate.out"

# 7b. the same with pre-copy: an old member SIGKILLed while the world trains beside the background copy
ROWSHIFT_FAULT=stall-ms=2000 run pcmigrate --checkpoint-dir "$tmp/ck7b" --checkpoint-every 30 --schedule 45:4
wait_for "$tmp/pcmigrate.err" "worker-3 generation 2: pre-copy began" 60
kill_worker 1
finished pcmigrate
check "7b. the loss during the pre-copy rolled the world back (the copy went with it)" \
	grep -q "recovery: worker-1 was lost .*; rolling back to" "$tmp/pcmigrate.out"
check "7b. the job ended on 4 workers" grep -q "training done: 4 workers, 120 steps" "$tmp/pcmigrate.out"
check "7b. its final weights equal the undisturbed run's, on 4 workers" bash -c \
	"'$bin/rowshiftctl' checkpoint diff '$tmp/base.final' '$tmp/pcmigrate.final' --max-rel 1e-5 >/dev/null"

# 8. partial recovery
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c.setdefault("cluster", {})["recovery"] = "partial"
json.dump(c, open(sys.argv[2], "w"))' "$cfg" "$tmp/partial.json"
held=$("$bin/rowshiftctl" plan --config "$tmp/partial.json" --world 3 --json | python3 -c 'import json, sys
p = json.load(sys.stdin)  # generation 1 is planned afresh for 3 workers; worker-1 is rank 1
rows = 0
for t in p["tables"]:  # distinct rows: a row of two column blocks counts once
    if t["sharding"] != "data_parallel":
        rows += len({r for s in t["shards"] if s["rank"] == 1 for r in range(s["row_offset"], s["row_offset"] + s["rows"])})
print(rows)')
cfg=$tmp/partial.json ROWSHIFT_FAULT=exit-after-checkpoint=60@worker-1 run partial --checkpoint-dir "$tmp/ck8" \
	--checkpoint-every 30
finished partial
check "partial: worker-1's rows come back from the latest checkpoint, the others keep theirs" \
	grep -q "^recovery: worker-1 was lost holding the only copy of rows of .*; restoring the rows lost with every copy from the latest checkpoint" "$tmp/partial.out"
check "partial: no rollback, no step trained again; the $held rows worker-1 held are reported stale, from step 60" \
	grep -q "^recovered: generation 2 (3 workers) made step 61, .*(partial: $held stale rows restored from step 60, 0 steps old; no step lost)" "$tmp/partial.out"
check "partial: --log-json has it, with the stale rows" \
	grep -q "\"event\":\"recovered\",\"kind\":\"partial\".*\"restored_step\":60,\"stale_rows\":$held" "$tmp/partial.jsonl"
equal partial
port=$(free_port)
cfg=$tmp/partial.json ROWSHIFT_FAULT=$hold90 run stale --checkpoint-dir "$tmp/ck9" --checkpoint-every 30 --listen "127.0.0.1:$port"
# step 60's checkpoint complete too: run beside another script, its writers were still at it at step 75
wait_for "$tmp/stale.out" "checkpoint of step 60 complete" 60
wait_for "$tmp/stale.out" "^step *7[0-9] " 60
kill_worker 1
wait_for "$tmp/stale.out" "^recovered:" 60
curl -s "http://127.0.0.1:$port/metrics" >"$tmp/metrics9.txt"
finished stale
check "stale: a SIGKILL after step 70: the rows restored are from step 60, the job trains on from where it stopped" \
	grep -q "^recovered: generation 2 (3 workers) made step [0-9]*, .*(partial: $held stale rows restored from step 60, [1-9][0-9]* steps old" "$tmp/stale.out"
check "stale: /metrics counts a partial recovery and its stale rows" bash -c \
	"grep -q '^rowshift_recoveries_total{kind=\"partial\"} 1$' '$tmp/metrics9.txt' &&
	 grep -q '^rowshift_recovery_stale_rows_total $held$' '$tmp/metrics9.txt' &&
	 grep -q '^rowshift_recoveries_total{kind=\"rollback\"} 0$' '$tmp/metrics9.txt'"
check "stale: its final weights are not the undisturbed run's (rows trained from older values)" bash -c \
	"! '$bin/rowshiftctl' checkpoint diff '$tmp/base.final' '$tmp/stale.final' --max-rel 1e-5 >/dev/null"

# 9. lost after the end
ROWSHIFT_FAULT=exit-before-done@worker-1 run late
finished late
check "late: the loss after the last step completes the job" \
	grep -q "worker-1 was lost .*; but worker-[02] finished the last step, so every rank did: the job is complete" "$tmp/late.err"
check "late: it reports the end, and no recovery" bash -c \
	"grep -q '^training done: 3 workers, 120 steps' '$tmp/late.out' && ! grep -q '^recovered:' '$tmp/late.out'"
equal late

[ "$fails" = 0 ] || for f in "$tmp"/*.out; do echo "--- $f"; grep -v "^step" "$f" | tail -12; done
finish_checks recovery
