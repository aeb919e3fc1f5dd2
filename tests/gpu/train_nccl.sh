#!/bin/bash
# train_nccl.sh - GPU workers on the NCCL transport reach the weights CPU
# workers reach on TCP, and, with more than one worker, an elastic run on
# NCCL (2 -> 3 -> 2, rows moved at the pause, then pre-copied while the old
# world trains) reaches the weights of a static run, bit for bit, and so
# does a run whose worker is SIGKILLed (rolled back to its checkpoint).
# Exits 77 (skipped) when no CUDA device can be used.
#
#   RS_GPU_WORKER_BIN   the worker the GPU runs use (default $BUILD/bin/rowshift-worker;
#                       make test-cudasim passes the simulator's, on the simulated NCCL)
#   RS_NCCL_WORKERS     workers of the NCCL runs (default 1). NCCL wants a GPU per rank and local
#                       workers share cuda:0, so on a GPU machine one worker, a world of one sending
#                       to itself, and no elastic run. Under the simulator every worker process has a
#                       device of its own: its wrapper passes 2.
#   RS_TRAIN_GPU_STEPS  steps of the static and at-the-pause runs (default 18, as train_gpu.sh);
#                       the pre-copied run takes three times as many
set -u
. "$(dirname "$0")/../lib/itest.sh"

gpu_bin=${RS_GPU_WORKER_BIN:-$bin/rowshift-worker}
workers=${RS_NCCL_WORKERS:-1}
steps=${RS_TRAIN_GPU_STEPS:-18}
s1=$((steps / 3)) s2=$((2 * steps / 3))
if ! dev=$("$gpu_bin" --device cuda --check-device 2>"$tmp/dev.err"); then
	echo "train_nccl: skipped: no CUDA device ($(tail -n 1 "$tmp/dev.err"))"
	exit 77
fi
echo "train_nccl: workers on $dev ($gpu_bin), $workers on NCCL, $steps steps"

# run NAME DEVICE TRANSPORT ARGS...: a local job, saving its checkpoint in $tmp/NAME
run() {
	local name=$1 device=$2 transport=$3 wbin=$bin/rowshift-worker; shift 3
	[ "$device" = cpu ] || wbin=$gpu_bin
	ROWSHIFT_WORKER_BIN=$wbin ROWSHIFT_DEVICE=$device ROWSHIFT_TRANSPORT=$transport timeout 300 \
		"$bin/rowshift-coordinator" --local --steps "${run_steps:-$steps}" --save "$tmp/$name" "$@" \
		>"$tmp/$name.out" 2>"$tmp/$name.err"
}

# dlrm-small at a quarter of its batch, deterministic (the default): the GPU engine's bits are the CPU's
model="$tmp/dlrm-small.json"
quarter_config examples/dlrm-small.json "$model"
run cpu cpu tcp --workers "$workers" --config "$model"
check "$workers CPU worker(s) on TCP train $steps steps" test $? = 0
run nccl cuda nccl --workers "$workers" --config "$model"
check "$workers GPU worker(s) on NCCL train $steps steps" test $? = 0
check "every GPU worker trained on an NCCL communicator of $workers" \
	test "$(grep -c "generation 1: NCCL communicator, rank [0-9]* of $workers\$" "$tmp/nccl.err")" = "$workers"
check "GPU + NCCL and CPU + TCP reach the same bits" same_bits "$tmp/cpu" "$tmp/nccl"

if [ "$workers" -ge 2 ]; then
	# 2 -> 3 -> 2 on NCCL with every row moved at the pause: each generation a new communicator
	with_precopy "$model" false "$tmp/at-pause.json"
	run at-pause cuda nccl --workers 2 --config "$tmp/at-pause.json" --schedule "$s1:3,$s2:2"
	check "a 2 -> 3 -> 2 run on NCCL (pre-copy off) finishes, resharding at the scheduled steps" bash -c \
		"grep -q 'generation 2 resumed at step $s1' $tmp/at-pause.out && grep -q 'generation 3 resumed at step $s2' $tmp/at-pause.out"
	check "generation 2's communicator had 3 ranks" grep -q "generation 2: NCCL communicator, rank 2 of 3" "$tmp/at-pause.err"
	check "the bytes moved at each reshard are the plan diff's" moved_is_plan_diff "$tmp/at-pause.out" 2
	check "elastic on NCCL (at the pause) = static CPU, bit for bit" same_bits "$tmp/cpu" "$tmp/at-pause"

	# the same pre-copied, over three times the steps, each at least 100 ms (a scheduled change is pre-copied
	# only once its joiners are in, a race over fast steps): the rounds go over the old generation's
	# communicator while it trains, the last dirty rows at the pause
	long=$((3 * steps))
	light_config examples/dlrm-small.json "$tmp/paced.json" 100
	run_steps=$long run long-cpu cpu tcp --workers 2 --config "$model"
	check "2 CPU workers train $long steps" test $? = 0
	run_steps=$long run precopy cuda nccl --workers 2 --config "$tmp/paced.json" --schedule "$steps:3,$((2 * steps)):2"
	check "a pre-copied 2 -> 3 -> 2 run on NCCL finishes, resharding at the scheduled steps" bash -c \
		"grep -q 'generation 2 resumed at step $steps' $tmp/precopy.out && grep -q 'generation 3 resumed at step $((2 * steps))' $tmp/precopy.out"
	check "generation 2's communicator had 3 ranks (the rounds went over NCCL)" \
		grep -q "generation 2: NCCL communicator, rank 2 of 3" "$tmp/precopy.err"
	check "both reshards were pre-copied while the workers trained" \
		test "$(grep -c 'checksum matches; pre-copied in [1-9][0-9]* rounds while training' "$tmp/precopy.out")" = 2
	check "rows updated after they were sent went again" \
		grep -q "pre-copied in .*\(; [1-9][0-9]* rows\|at the pause, [1-9][0-9]* (\)" "$tmp/precopy.err"
	check "the bytes moved at each pre-copied reshard are the plan diff's" moved_is_plan_diff "$tmp/precopy.out" 2
	check "elastic on NCCL (pre-copied) = static CPU, bit for bit" same_bits "$tmp/long-cpu" "$tmp/precopy"

	# a GPU worker on NCCL lost without warning (SIGKILL: a spot reclaim) once the checkpoint of step $steps is
	# complete: the survivor drops the generation instead of hanging (its communicator fails: the simulator's
	# NCCL reports the loss, as NCCL's network transport may, and test_transport_nccl also runs a loss reported
	# by nothing but the transport's deadline; or the coordinator tells it first), the world rolls back to the
	# latest checkpoint and the job ends with the undisturbed run's bits
	ROWSHIFT_WORKER_BIN=$gpu_bin ROWSHIFT_DEVICE=cuda ROWSHIFT_TRANSPORT=nccl timeout 300 "$bin/rowshift-coordinator" \
		--local --workers 2 --config "$tmp/paced.json" --steps $long --save "$tmp/lost" --checkpoint-dir "$tmp/ck" \
		--checkpoint-every "$steps" >"$tmp/lost.out" 2>"$tmp/lost.err" &
	coord=$!
	wait_for "$tmp/lost.out" "checkpoint of step $steps complete" 120
	pkill -9 -P "$(pgrep -P $coord)" -f -- "--name worker-1 "
	wait $coord
	check "a GPU worker on NCCL SIGKILLed mid-run: the job finishes" test $? = 0
	check "the world rolled back to a checkpoint" grep -q "recovery: worker-1 .*; rolling back to .*(step \($steps\|$((2 * steps))\))" \
		"$tmp/lost.out"
	# (whichever comes first: its communicator's error, or the coordinator's word, between two paced steps)
	check "the survivor dropped the generation, no hang" \
		grep -q "worker-0 .*generation 1 lost at step .*\(transport nccl: rank 0: .*remote process exited\|the coordinator dropped generation 1\)" \
		"$tmp/lost.err"
	check "the recovered run on NCCL = the undisturbed CPU run, bit for bit" same_bits "$tmp/long-cpu" "$tmp/lost"
fi
[ "$fails" = 0 ] || for f in "$tmp"/*.err; do echo "--- $(basename "$f") (tail)"; tail -n 5 "$f"; done
finish_checks train_nccl
