#!/bin/bash
# determinism.sh - with "train": {"deterministic": true}, the demo model
# (every sharding type, a ZCH table, row-wise Adagrad) trains to the same
# bits on any number of workers and through any rescale:
#   1. 1, 2, 3 and 4 workers, 400 steps: bitwise-identical checkpoints
#      (rowshiftctl checkpoint diff says "identical"), and the same loss and
#      AUC in every report
#   2. 2 -> 4 -> 3 workers live, 120 steps, pre-copied (the default): the
#      static run's checkpoint of step 120, bit for bit
#   3. a worker SIGKILLed after the checkpoint of step 60 (of 240): the
#      world rolls back and finishes with the static run's bits
#   4. 2 replica groups of 2 (2D, exact sync), 120 steps: the same bits
set -u
. "$(dirname "$0")/../lib/itest.sh"

cfg="$tmp/det.json"
python3 - "$cfg" <<'PY'
import json, sys
c = json.load(open("examples/dlrm-small.json"))
c["train"]["deterministic"] = True
c["train"]["global_batch"] = 256  # a quarter of the demo's: the same tables, a third of the CPU time
c["data"]["eval_every"] = 100
c["data"]["eval_samples"] = 2048
json.dump(c, open(sys.argv[1], "w"))
PY
job() { # job NAME WORKERS STEPS FLAGS...: a local job, saved to $tmp/NAME, in the background
	local name=$1 w=$2 steps=$3
	shift 3
	timeout 240 "$bin/rowshift-coordinator" --local --workers "$w" --config "${jobcfg:-$cfg}" --steps "$steps" \
		--save "$tmp/$name" --log-json "$tmp/$name.jsonl" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
}
identical() { # identical WHAT A B: the two checkpoints are equal bit for bit
	"$bin/rowshiftctl" checkpoint diff "$2" "$3" >"$tmp/diff.out" 2>&1
	local before=$fails
	check "$1" bash -c "tail -n 1 $tmp/diff.out | grep -qx identical && grep -Eq '^overall +0 +0\$' $tmp/diff.out"
	[ "$fails" = "$before" ] || cat "$tmp/diff.out"
}
reports() { # reports NAME: its step and evaluation reports, without the timings
	python3 - "$tmp/$1.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "loss" in r or "auc" in r:
        print(r.get("step"), repr(r.get("loss")), repr(r.get("auc")))
PY
}

# 1. static, two jobs at a time (the machine has two cores); w1 keeps its checkpoints of steps 120 and 240
job w1 1 400 --checkpoint-dir "$tmp/ck1" --checkpoint-every 120 --checkpoint-keep 4
job w2 2 400
wait
job w3 3 400
job w4 4 400
wait
for w in 1 2 3 4; do
	check "$w worker(s): 400 steps" grep -q "training done: $w workers, 400 steps" "$tmp/w$w.out"
done
reports w1 >"$tmp/w1.reports"
for w in 2 3 4; do
	identical "$w workers end with 1 worker's bits (rowshiftctl checkpoint diff: identical)" "$tmp/w1" "$tmp/w$w"
	reports "w$w" >"$tmp/w$w.reports"
	check "$w workers report 1 worker's losses and AUCs, digit for digit" cmp "$tmp/w1.reports" "$tmp/w$w.reports"
done
"$bin/rowshiftctl" checkpoint diff "$tmp/ck1/step-000000120" "$tmp/w1" >"$tmp/diff-steps.out" 2>&1
check "checkpoints that differ: diff says so, and that their steps differ" bash -c \
	"tail -n 1 $tmp/diff-steps.out | grep -q '^differ (max_rel ' && grep -q 'different steps (120 and 400)' $tmp/diff-steps.out"
check "the reports hold losses and AUCs (the comparison saw some)" \
	bash -c "[ \$(grep -c ' None\$' $tmp/w1.reports) -ge 30 ] && [ \$(grep -vc ' None\$' $tmp/w1.reports) -ge 4 ]"

# 2. elastic 2 -> 4 -> 3, 3. a lost worker (rollback to its latest checkpoint), 4. 2D
# paced (25 ms a step at least, which changes no bit): unpaced, under make test's load, the world once reached step 40
# before its joiners were up to pre-copy, and that reshard moved its rows at the pause instead
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["train"]["min_step_ms"] = 25
json.dump(c, open(sys.argv[2], "w"))' "$cfg" "$tmp/det-paced.json"
jobcfg=$tmp/det-paced.json job elastic 2 120 --schedule 40:4,80:3
job twod 4 120 --sharding-group 2
# 240 steps: the checkpoint of step 60 may complete many steps later when its writers are slow (three jobs
# share two cores), and the kill must come before the last step
job lost 3 240 --checkpoint-dir "$tmp/ck-lost" --checkpoint-every 60
coord=$!
wait_for "$tmp/lost.out" "checkpoint of step 60 complete" 120
pkill -9 -P "$(pgrep -P $coord)" -f -- "--name worker-1 "
wait
check "the elastic run went 2 -> 4 -> 3" bash -c "grep -q '2 -> 4 workers' $tmp/elastic.out && grep -q '4 -> 3 workers' $tmp/elastic.out"
check "both of its reshards were pre-copied while training, and the report says so" bash -c \
	"grep -q 'generation 2: pre-copied in [1-9]' $tmp/elastic.err && grep -q 'generation 3: pre-copied in [1-9]' $tmp/elastic.err &&
	 [ \$(grep -c 'checksum matches; pre-copied in [1-9][0-9]* rounds while training' $tmp/elastic.out) = 2 ]"
check "the pre-copied reshards resumed at the scheduled steps" bash -c \
	"grep -q 'generation 2 resumed at step 40' $tmp/elastic.out && grep -q 'generation 3 resumed at step 80' $tmp/elastic.out"
check "rows updated after they were sent went again at the pause" \
	grep -q "pre-copied in [0-9]* rounds while training; [1-9][0-9]* rows" "$tmp/elastic.err"
identical "2 -> 4 -> 3 ends with the static run's bits at step 120" "$tmp/ck1/step-000000120" "$tmp/elastic"
check "the lost worker's world rolled back to its checkpoint" grep -q "rolling back to .*(step \(60\|120\))" "$tmp/lost.out"
identical "after the rollback, the static run's bits at step 240" "$tmp/ck1/step-000000240" "$tmp/lost"
check "the 2D run trained in 2 replica groups of 2" grep -q "4 workers in 2 replica groups of 2" "$tmp/twod.err"
identical "2 replica groups of 2 end with 1 worker's bits at step 120" "$tmp/ck1/step-000000120" "$tmp/twod"

finish_checks determinism
