#!/bin/bash
# local_train.sh - the coordinator's local mode end to end, with the real
# binaries: a run trains and learns; a worker with the wrong join token is
# refused; workers exit when the coordinator dies (a killed worker:
# recovery.sh); workers that cannot run fail the job at once, saying why.
# Every wait here is bounded.
set -u
. "$(dirname "$0")/../lib/itest.sh"
# dlrm-small at a quarter of its batch for the runs of a fixed number of steps compared with each other, and
# paced (25 ms a step) for the jobs acted on while they train; section 1 (the AUC it reaches) takes the whole batch
quarter=$tmp/quarter.json light=$tmp/light.json
quarter_config examples/dlrm-small.json "$quarter"
light_config examples/dlrm-small.json "$light"

# 1. three workers train and the held-out AUC climbs
timeout 120 "$bin/rowshift-coordinator" --local --workers 3 --config examples/dlrm-small.json --steps 150 \
	--log-json "$tmp/log.json" >"$tmp/run.out" 2>"$tmp/run.err"
rc=$?
check "a 3-worker local run finishes" test "$rc" = 0
check "it reports every step count it reached" grep -q '"step":150' "$tmp/log.json"
check "the held-out AUC climbs above 0.6" python3 -c "
import json, sys
aucs = [json.loads(l)['auc'] for l in open('$tmp/log.json') if 'auc' in l]
print('AUC over the run:', ' '.join('%.3f' % a for a in aucs))
sys.exit(0 if aucs and aucs[-1] > 0.6 and aucs[-1] > aucs[0] else 1)"

# Criteo input: bad lines are reported with file and line, training goes on with the good ones
timeout 60 "$bin/rowshift-coordinator" --local --workers 2 --config examples/criteo-small.json --steps 20 \
	>"$tmp/criteo.out" 2>"$tmp/criteo.err"
check "a Criteo run with malformed lines trains" test $? = 0
check "the malformed lines are reported with file and line" grep -q "small.tsv:4: categorical field is not hexadecimal" "$tmp/criteo.err"

# 2. checkpoints: 1 and 3 workers reach the same model; the files are plain safetensors
for w in 1 3; do
	timeout 120 "$bin/rowshift-coordinator" --local --workers $w --config "$quarter" --steps 40 \
		--save "$tmp/ckpt$w" >"$tmp/save$w.out" 2>&1
	check "a $w-worker run saves a checkpoint" test -f "$tmp/ckpt$w/index.json"
done
check "1 and 3 workers end with the same bits" bash -c \
	"'$bin/rowshiftctl' checkpoint diff '$tmp/ckpt1' '$tmp/ckpt3' | tail -n 1 | grep -qx identical"
light_config examples/dlrm-small.json "$tmp/paced.json" 100 # the quarter batch, each step at least 100 ms
t0=$EPOCHREALTIME
timeout 120 "$bin/rowshift-coordinator" --local --workers 2 --config "$tmp/paced.json" --steps 40 --save "$tmp/paced" \
	>"$tmp/paced.out" 2>&1
t1=$EPOCHREALTIME
took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
check "train.min_step_ms 100: 40 steps take at least 4 s, the start included (took $took s; unpaced under 1 s)" \
	awk -v t="$took" 'BEGIN { exit !(t >= 4) }'
check "... and end with the same bits as an unpaced run" bash -c \
	"'$bin/rowshiftctl' checkpoint diff '$tmp/ckpt1' '$tmp/paced' | tail -n 1 | grep -qx identical"
check "every checkpoint file reads as safetensors in Python" bash -c \
	"for f in $tmp/ckpt3/*.safetensors; do python3 tests/integration/safetensors_check.py \$f >/dev/null || exit 1; done"
sed 's/"rows": 1000,/"rows": 999,/' examples/dlrm-small.json > "$tmp/other.json"
timeout 60 "$bin/rowshift-coordinator" --local --workers 1 --config "$tmp/other.json" --steps 2 --save "$tmp/ckpt_other" >/dev/null 2>&1
"$bin/rowshiftctl" checkpoint diff "$tmp/ckpt1" "$tmp/ckpt_other" >"$tmp/diff_other.out" 2>&1
check "checkpoints of different shapes are refused, naming the table" grep -q "table 'category'" "$tmp/diff_other.out"

# loading: a checkpoint of 3 workers at step 40, loaded by 2 workers who go on to step 60, equals 60 steps on 2
# (deterministic training, the default: bit for bit, ZCH identities and eviction state included)
timeout 60 "$bin/rowshift-coordinator" --local --workers 3 --config "$quarter" --steps 40 --save "$tmp/ck40" >/dev/null 2>&1
timeout 60 "$bin/rowshift-coordinator" --local --workers 2 --config "$quarter" --steps 60 --load "$tmp/ck40" \
	--save "$tmp/ck60" >"$tmp/load.out" 2>"$tmp/load.err"
check "a 2-worker run loads a 3-worker checkpoint and goes on from its step" grep -q "loaded .*ck40 (step 40)" "$tmp/load.err"
timeout 60 "$bin/rowshift-coordinator" --local --workers 2 --config "$quarter" --steps 60 --save "$tmp/st60" >/dev/null 2>&1
check "save at 40 + load + 20 steps equals 60 steps, bit for bit" bash -c \
	"'$bin/rowshiftctl' checkpoint diff '$tmp/st60' '$tmp/ck60' | tail -n 1 | grep -qx identical"
head -c 100 "$tmp/ck40/index.json" > "$tmp/ck40/index.trunc" && mv "$tmp/ck40/index.trunc" "$tmp/ck40/index.json"
timeout 60 "$bin/rowshift-coordinator" --local --workers 2 --config "$quarter" --steps 60 --load "$tmp/ck40" \
	>"$tmp/load_bad.out" 2>&1
check "a damaged checkpoint index is refused, naming the file" bash -c "grep -q 'ck40/index.json:' $tmp/load_bad.out"

# live rescaling: 2 -> 4 at step 50 -> 3 at step 120, as make demo does
timeout 120 "$bin/rowshift-coordinator" --local --workers 2 --config "$quarter" --steps 150 \
	--schedule 50:4,120:3 --save "$tmp/elastic" >"$tmp/elastic.out" 2>"$tmp/elastic.err"
check "a 2 -> 4 -> 3 run finishes" test $? = 0
check "it resharded twice, moving what the plan says" bash -c \
	"grep -q 'generation 2: 2 -> 4 workers at step 50' $tmp/elastic.out && grep -q 'generation 3: 4 -> 3 workers at step 120' $tmp/elastic.out"
check "the bytes moved at each reshard are the plan diff's" moved_is_plan_diff "$tmp/elastic.out" 2
check "training resumed at the same steps" bash -c \
	"grep -q 'generation 2 resumed at step 50' $tmp/elastic.out && grep -q 'generation 3 resumed at step 120' $tmp/elastic.out"
# (that it ends with a static run's bits: tests/integration/determinism.sh)

# rowshiftctl scale: live, at the next step boundary, while the job runs
"$bin/rowshift-coordinator" --local --workers 2 --config "$light" --steps 200 \
	--admin-file "$tmp/admin.json" >"$tmp/scale.out" 2>"$tmp/scale.err" &
job=$!
for _ in $(seq 1 100); do grep -q "^step" "$tmp/scale.out" && break; sleep 0.1; done
"$bin/rowshiftctl" scale --workers 3 --admin-file "$tmp/admin.json" >"$tmp/scale1.out" 2>&1
for _ in $(seq 1 100); do grep -q "resumed" "$tmp/scale.out" && break; sleep 0.1; done
"$bin/rowshiftctl" scale --workers 1 --admin-file "$tmp/admin.json" >"$tmp/scale2.out" 2>&1
wait_pid $job 120
check "a job scaled by rowshiftctl finishes (exit $?)" grep -q "training done: 1 workers, 200 steps, 3 generation(s), 2 reshard(s)" "$tmp/scale.out"
check "rowshiftctl scale went 2 -> 3 -> 1" bash -c "grep -q '2 -> 3 workers' $tmp/scale.out && grep -q '3 -> 1 workers' $tmp/scale.out"
check "rowshiftctl reports what it asked" grep -q "scaling to 3 workers" "$tmp/scale1.out"
"$bin/rowshiftctl" scale --workers 2 --admin-file "$tmp/admin.json" >"$tmp/scale3.out" 2>&1
check "scaling a job that ended fails clearly" bash -c "grep -q 'is a coordinator running' $tmp/scale3.out"

# a worker refuses devices and transports it cannot use, before joining anyone
ROWSHIFT_JOIN_TOKEN=t timeout 20 "$bin/rowshift-worker" --coordinator ws://127.0.0.1:1 --config examples/dlrm-small.json \
	--device cpu --transport nccl >"$tmp/dev1.out" 2>&1
check "--transport nccl on the CPU is refused, saying why" grep -q "transport nccl needs the worker on a CUDA device" "$tmp/dev1.out"
ROWSHIFT_JOIN_TOKEN=t timeout 20 "$bin/rowshift-worker" --coordinator ws://127.0.0.1:1 --config examples/dlrm-small.json \
	--device tpu >"$tmp/dev2.out" 2>&1
check "an unknown --device is refused, naming it" grep -q "'tpu' is not auto, cpu, cuda or cuda:N" "$tmp/dev2.out"
check "a worker's --timeout-ms out of range is refused, not replaced by a default" bash -c \
	"ROWSHIFT_JOIN_TOKEN=t timeout 20 '$bin/rowshift-worker' --coordinator ws://127.0.0.1:1 --config examples/dlrm-small.json \
	 --timeout-ms 0 >$tmp/tmo.out 2>&1; [ \$? -eq 2 ] && grep -q -- '--timeout-ms: 100..3600000' $tmp/tmo.out"
check "--check-device says where a default worker's shards go" bash -c \
	"\"$bin/rowshift-worker\" --check-device | grep -Eq '^(cpu|cuda:0)\$'"

# 3. a worker with the wrong join token is refused
port=$(free_port)
# (no `timeout` wrapper in front: $! must be the coordinator itself; the trap cleans up)
"$bin/rowshift-coordinator" --local --workers 1 --config "$light" --steps 100000 \
	--listen 127.0.0.1:$port --grace-ms 3000 --admin-file "$tmp/c2-admin.json" >"$tmp/c2.out" 2>"$tmp/c2.err" &
coord=$!
sleep 1
ROWSHIFT_JOIN_TOKEN=not-the-token timeout 20 "$bin/rowshift-worker" --coordinator ws://127.0.0.1:$port \
	--config "$light" --name intruder >"$tmp/intruder.out" 2>&1
rc=$?
check "the intruder exits with an error" test "$rc" != 0 -a "$rc" != 124
check "it was refused for its token" grep -q "bad join token" "$tmp/intruder.out"
check "the coordinator logged the refusal" grep -q "refused worker 'intruder'" "$tmp/c2.err"

token=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["token"])' "$tmp/c2-admin.json")
model=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["model"])' "$tmp/c2-admin.json")

# a worker with the token but another model config (another batch and seed) is refused for good, the sections named
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["train"].update(global_batch=128, seed=7)
json.dump(c, open(sys.argv[2], "w"))' "$light" "$tmp/other.json"
ROWSHIFT_JOIN_TOKEN=$token timeout 20 "$bin/rowshift-worker" --coordinator ws://127.0.0.1:$port \
	--config "$tmp/other.json" --name stranger >"$tmp/stranger.out" 2>&1
rc=$?
check "a worker with another model config exits with an error (exit $rc)" test "$rc" != 0 -a "$rc" != 124
check "it was refused, naming what differs" grep -q "refused the join: its model config differs from the coordinator's in train" \
	"$tmp/stranger.out"
check "the coordinator logged the refusal" grep -q "refused worker 'stranger' .*model config differs .* in train" "$tmp/c2.err"
# bad input on the control channel closes that client at most; training goes on
for case in malformed badtoken early oversized joined newer unversioned nomodel; do
	ROWSHIFT_JOIN_TOKEN=$token ROWSHIFT_MODEL=$model timeout 30 python3 tests/integration/ws_probe.py $port $case >"$tmp/probe-$case.out" 2>&1
done
check "malformed JSON before the join is refused and closed" \
	bash -c "grep -q '\"type\": *\"refused\"' $tmp/probe-malformed.out && tail -1 $tmp/probe-malformed.out | grep -q closed"
check "a join proving a wrong token is refused and closed" \
	bash -c "grep -q 'bad join token' $tmp/probe-badtoken.out && tail -1 $tmp/probe-badtoken.out | grep -q closed"
check "a message before the join is refused and closed" \
	bash -c "grep -q 'must be a join' $tmp/probe-early.out && tail -1 $tmp/probe-early.out | grep -q closed"
check "a client that has not joined may not send more than a join: refused and closed" \
	bash -c "grep -q 'too large' $tmp/probe-oversized.out && tail -1 $tmp/probe-oversized.out | grep -q closed"
check "an oversized message from a joined client is dropped with an error and the client may go on" \
	bash -c "grep -q '\"type\": *\"welcome\"' $tmp/probe-joined.out && grep -q 'too large' $tmp/probe-joined.out && tail -1 $tmp/probe-joined.out | grep -q open"
for case in newer unversioned; do
	check "a join of another control protocol ($case) proving the token: refused naming both versions, signed, closed" \
		bash -c "grep -q 'control protocol [04]; this coordinator speaks 3 (rowshift [0-9.]*): run the same rowshift version' $tmp/probe-$case.out &&
			 grep -qx signed $tmp/probe-$case.out && tail -1 $tmp/probe-$case.out | grep -q closed"
done
check "a worker's join proving the token without its model config's digest: refused, signed, closed" \
	bash -c "grep -q \"a worker's join must carry its model config's digest\" $tmp/probe-nomodel.out &&
		 grep -qx signed $tmp/probe-nomodel.out && tail -1 $tmp/probe-nomodel.out | grep -q closed"
check "the coordinator logged what was wrong" grep -q "control: refused a connection from 127.0.0.1: malformed JSON" "$tmp/c2.err"
check "the job survived the probes" kill -0 $coord

# 4. coordinator killed and not restarted: its workers wait --grace-ms (3 s here) for it, then exit
kill -9 $coord
{ wait $coord; } 2>/dev/null
gone=0
for _ in $(seq 1 100); do
	if ! pgrep -f "[r]owshift-worker --coordinator ws://127.0.0.1:$port " >/dev/null; then gone=1; break; fi
	sleep 0.1
done
check "workers exit within 10 s of the coordinator's death" test "$gone" = 1

# 5. workers that cannot run (here: an option they refuse) exit before joining: the job fails at once, saying why
t0=$(date +%s)
ROWSHIFT_FAULT=no-such-hook timeout 60 "$bin/rowshift-coordinator" --local --workers 2 --config examples/minimal.json \
	--steps 10 --listen 127.0.0.1:0 >"$tmp/never.out" 2>"$tmp/never.err"
rc=$?
check "workers that exit before joining, time after time, fail the job (exit $rc, after $(($(date +%s) - t0)) s), not the join timeout" \
	bash -c "[ $rc = 1 ] && grep -q 'worker-[01] exited with status 2 before it joined, 5 times in a row' '$tmp/never.err' &&
		 grep -q \"unknown hook 'no-such-hook'\" '$tmp/never.err'"

[ "$fails" = 0 ] || pgrep -af rowshift
echo "local_train: $fails failed"
[ "$fails" = 0 ]
