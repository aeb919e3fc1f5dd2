#!/bin/bash
# train_gpu.sh - training on the GPU engine, end to end with the real
# binaries: worker processes sharing one GPU (TCP between them, shards and
# kernels on the device) reach the weights CPU workers reach, and a
# 2 -> 3 -> 2 elastic run on the GPU (rows moved out of and into managed
# memory), pre-copied and at the pause, reaches the weights of a static
# run. Exits 77 (skipped) when no CUDA device can be used. (The NCCL
# transport: train_nccl.sh.)
#
#   RS_GPU_WORKER_BIN    the worker the GPU runs use (default $BUILD/bin/rowshift-worker;
#                        make test-cudasim passes the simulator's, build/cudasim/bin/rowshift-worker)
#   RS_TRAIN_GPU_STEPS   steps of every run (default 18, what the simulator runs); the elastic
#                        run at the pause goes to 3 workers at a third of them and back to 2 at
#                        two thirds; the pre-copied one runs three times as many, rescaling at
#                        the first and second third
#
# Training is deterministic by default: the GPU engine runs the same
# embedding arithmetic as the CPU's (the kernels are written bit-exact) and
# the dense network on the host's loops, so GPU and CPU runs, static or
# elastic, must end with the same bits ("identical"); the max_rel <= 1e-5
# checks are of the plain float sums' mode ("deterministic": false, where
# cuBLAS sums in its own order), run on the demo model (dlrm-small, here at
# a quarter of its batch).
#
# Why 18 steps by default: the simulator is slow, and with the plain float
# sums, runs of the demo model whose rounding differs drift apart early (2
# CPU workers leave 1 CPU worker's weights at step 19 at its whole batch: rounding noise
# meeting row-wise Adagrad), so past that point no 1e-5 comparison holds.
set -u
. "$(dirname "$0")/../lib/itest.sh"

gpu_bin=${RS_GPU_WORKER_BIN:-$bin/rowshift-worker}
steps=${RS_TRAIN_GPU_STEPS:-18}
s1=$((steps / 3)) s2=$((2 * steps / 3))
if ! dev=$("$gpu_bin" --device cuda --check-device 2>"$tmp/dev.err"); then
	echo "train_gpu: skipped: no CUDA device ($(tail -n 1 "$tmp/dev.err"))"
	exit 77
fi
echo "train_gpu: workers on $dev ($gpu_bin), $steps steps${RS_CUDASIM_SEED:+, RS_CUDASIM_SEED=$RS_CUDASIM_SEED}"

# run NAME DEVICE ARGS...: a local job whose workers use DEVICE (the GPU worker binary for cuda), saving its checkpoint in $tmp/NAME
run() {
	local name=$1 device=$2 wbin=$bin/rowshift-worker; shift 2
	[ "$device" = cpu ] || wbin=$gpu_bin
	ROWSHIFT_WORKER_BIN=$wbin ROWSHIFT_DEVICE=$device ROWSHIFT_TRANSPORT=tcp timeout 300 \
		"$bin/rowshift-coordinator" --local --steps "${run_steps:-$steps}" --save "$tmp/$name" "$@" >"$tmp/$name.out" \
		2>"$tmp/$name.err"
}

identical() { # identical WHAT A B: the two checkpoints are equal bit for bit
	"$bin/rowshiftctl" checkpoint diff "$2" "$3" >"$tmp/diff.out" 2>&1
	local before=$fails
	check "$1" bash -c "tail -n 1 $tmp/diff.out | grep -qx identical"
	[ "$fails" = "$before" ] || cat "$tmp/diff.out"
}

# dlrm-small at a quarter of its batch (quarter_config): the same tables, plans and moves for a quarter of the
# simulator's work
small="$tmp/dlrm-small.json" plain="$tmp/dlrm-small-plain.json"
quarter_config examples/dlrm-small.json "$small"
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["train"]["deterministic"] = False; json.dump(c, open(sys.argv[2], "w"))' \
	"$small" "$plain"
for model in "$small" tests/data/train-model.json "$plain"; do
	m=$(basename "$model" .json)
	run "$m-cpu" cpu --workers 2 --config "$model"
	check "$m: 2 CPU workers train $steps steps" test $? = 0
	run "$m-gpu" cuda --workers 2 --config "$model"
	check "$m: 2 GPU workers sharing the device train $steps steps" test $? = 0
	check "$m: the GPU workers said they used the device" grep -q "shards and kernels on cuda:0" "$tmp/$m-gpu.err"
	if [ "$model" = "$plain" ]; then
		check "$m: GPU and CPU training reach the same weights (plain sums: max_rel <= 1e-5)" \
			"$bin/rowshiftctl" checkpoint diff "$tmp/$m-cpu" "$tmp/$m-gpu" --max-rel 1e-5
	else
		identical "$m: GPU and CPU training reach the same bits (deterministic)" "$tmp/$m-cpu" "$tmp/$m-gpu"
	fi
done

# elastic on the GPU: 2 -> 3 at a third of the steps -> 2 at two thirds, against the static GPU and CPU runs,
# with every row moved at the pause
model=$small
with_precopy $model false "$tmp/at-pause.json"
run elastic-pause cuda --workers 2 --config "$tmp/at-pause.json" --schedule "$s1:3,$s2:2"
check "a 2 -> 3 -> 2 run of GPU workers (pre-copy off) finishes, resharding twice at the scheduled steps" bash -c \
	"grep -q 'generation 2 resumed at step $s1' $tmp/elastic-pause.out && grep -q 'generation 3 resumed at step $s2' $tmp/elastic-pause.out"
check "the bytes moved at each reshard at the pause are the plan diff's" moved_is_plan_diff "$tmp/elastic-pause.out" 2
identical "elastic GPU (at the pause) = static GPU, bit for bit" "$tmp/dlrm-small-gpu" "$tmp/elastic-pause"
identical "elastic GPU (at the pause) = static CPU, bit for bit" "$tmp/dlrm-small-cpu" "$tmp/elastic-pause"

# the same pre-copied (the default: the rows move out of and into managed memory between steps while the old
# world trains), over three times the steps, each at least 100 ms (light_config; the idle changes no result): a
# scheduled change is pre-copied only when its joiners are in and the rounds have begun before its step, a race
# over a few fast steps (a joiner starts its process, its device and its transport first). Against a static CPU
# run of as many steps, unpaced (the GPU's bits are the CPU's, checked above).
long=$((3 * steps))
light_config examples/dlrm-small.json "$tmp/paced.json" 100
run_steps=$long run long-cpu cpu --workers 2 --config $model
check "2 CPU workers train $long steps" test $? = 0
run_steps=$long run elastic cuda --workers 2 --config "$tmp/paced.json" --schedule "$steps:3,$((2 * steps)):2"
check "a pre-copied 2 -> 3 -> 2 run of GPU workers finishes, resharding twice at the scheduled steps" bash -c \
	"grep -q 'generation 2 resumed at step $steps' $tmp/elastic.out && grep -q 'generation 3 resumed at step $((2 * steps))' $tmp/elastic.out"
check "the bytes moved at each pre-copied reshard are the plan diff's (rows sent again counted apart)" \
	moved_is_plan_diff "$tmp/elastic.out" 2
check "both reshards were pre-copied while the GPU workers trained" \
	test "$(grep -c 'checksum matches; pre-copied in [1-9][0-9]* rounds while training' "$tmp/elastic.out")" = 2
check "rows the GPU updated after they were sent went again (dirty marks after the device's update)" \
	grep -q "pre-copied in .*\(; [1-9][0-9]* rows\|at the pause, [1-9][0-9]* (\)" "$tmp/elastic.err"
identical "elastic GPU (pre-copied) = static CPU, bit for bit" "$tmp/long-cpu" "$tmp/elastic"
[ "$fails" = 0 ] || for f in "$tmp"/*.err; do echo "--- $(basename "$f") (tail)"; tail -n 5 "$f"; done
finish_checks train_gpu
