#!/bin/bash
# train_gpu.sh - training on the GPU engine, end to end with the real
# binaries: worker processes sharing one GPU (TCP between them, shards and
# kernels on the device) reach the weights CPU workers reach, and a
# 2 -> 3 -> 2 elastic run on the GPU (rows moved out of and into managed
# memory) reaches the weights of a static run. Exits 77 (skipped) when no
# CUDA device can be used. (The NCCL transport: train_nccl.sh.)
#
#   RS_GPU_WORKER_BIN    the worker the GPU runs use (default $BUILD/bin/rowshift-worker;
#                        make test-cudasim passes the simulator's, build/cudasim/bin/rowshift-worker)
#   RS_TRAIN_GPU_STEPS   steps of every run (default 18, what the simulator runs); the elastic
#                        run goes to 3 workers at a third of them and back to 2 at two thirds
#
# The documented tolerance is max_rel <= 1e-5 (the CPU's between world
# sizes); the kernels are meant to be bit-exact, and the figures printed say
# how close they came.
#
# Why 18 steps, on a GPU too: runs of the demo model whose rounding differs
# drift apart early today (issue 18, determinism: on examples/dlrm-small.json
# 2 CPU workers leave 1 CPU worker's weights at step 19, rounding noise
# meeting row-wise Adagrad), and GPU and CPU round the dense products
# differently, so past that point no 1e-5 comparison with the CPU holds.
# Measured under the simulator: at 150 steps (the old default) 2 GPU workers
# end 0.88 (max_rel) from 2 CPU workers on dlrm-small, as far as 1 CPU worker
# is, so "GPU = CPU" and "elastic GPU = static CPU" fail there for that reason
# alone; at 18 steps they agree to 1.6e-6. A real GPU sums in cuBLAS's order,
# not the simulator's, so even 18 steps is unmeasured there until a GPU runs
# this. Raise the default when training is deterministic.
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
		"$bin/rowshift-coordinator" --local --steps "$steps" --save "$tmp/$name" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
}

for model in examples/dlrm-small.json tests/data/train-model.json; do
	m=$(basename "$model" .json)
	run "$m-cpu" cpu --workers 2 --config "$model"
	check "$m: 2 CPU workers train $steps steps" test $? = 0
	run "$m-gpu" cuda --workers 2 --config "$model"
	check "$m: 2 GPU workers sharing the device train $steps steps" test $? = 0
	check "$m: the GPU workers said they used the device" grep -q "shards and kernels on cuda:0" "$tmp/$m-gpu.err"
	check "$m: GPU and CPU training reach the same weights (max_rel <= 1e-5)" \
		"$bin/rowshiftctl" checkpoint diff "$tmp/$m-cpu" "$tmp/$m-gpu" --max-rel 1e-5
done

# elastic on the GPU: 2 -> 3 at a third of the steps -> 2 at two thirds, against the static GPU and CPU runs
model=examples/dlrm-small.json
run elastic cuda --workers 2 --config $model --schedule "$s1:3,$s2:2"
check "a 2 -> 3 -> 2 run of GPU workers finishes" test $? = 0
check "it resharded twice and resumed at the same steps" bash -c \
	"grep -q 'generation 2 resumed at step $s1' $tmp/elastic.out && grep -q 'generation 3 resumed at step $s2' $tmp/elastic.out"
check "the bytes moved at each reshard are the plan diff's" moved_is_plan_diff "$tmp/elastic.out" 2
check "elastic GPU = static GPU (max_rel <= 1e-5)" \
	"$bin/rowshiftctl" checkpoint diff "$tmp/dlrm-small-gpu" "$tmp/elastic" --max-rel 1e-5
check "elastic GPU = static CPU (max_rel <= 1e-5)" \
	"$bin/rowshiftctl" checkpoint diff "$tmp/dlrm-small-cpu" "$tmp/elastic" --max-rel 1e-5
[ "$fails" = 0 ] || for f in "$tmp"/*.err; do echo "--- $(basename "$f") (tail)"; tail -n 5 "$f"; done
finish_checks train_gpu
