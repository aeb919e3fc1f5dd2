#!/bin/bash
# train_gpu.sh - training on the GPU engine, end to end with the real
# binaries: worker processes sharing one GPU (TCP between them, shards and
# kernels on the device) reach the weights CPU workers reach, and a
# 2 -> 3 -> 2 elastic run on the GPU (rows moved out of and into managed
# memory) reaches the weights of a static run; one worker on the NCCL
# transport (NCCL needs a GPU per rank: one rank here, sending to itself)
# reaches the one-CPU-worker weights. Exits 77 (skipped) when no CUDA
# device can be used.
#
# The documented tolerance is max_rel <= 1e-5 (the CPU's between world
# sizes); the kernels are meant to be bit-exact, and the figures printed say
# how close they came.
set -u
. "$(dirname "$0")/../lib/itest.sh"

if ! dev=$("$bin/rowshift-worker" --device cuda --check-device 2>"$tmp/dev.err"); then
	echo "train_gpu: skipped: no CUDA device ($(tail -n 1 "$tmp/dev.err"))"
	exit 77
fi
echo "train_gpu: workers on $dev"

# run NAME DEVICE ARGS...: a local job whose workers use DEVICE, saving its checkpoint in $tmp/NAME
run() {
	local name=$1 device=$2; shift 2
	ROWSHIFT_DEVICE=$device ROWSHIFT_TRANSPORT=${TRANSPORT:-tcp} timeout 300 "$bin/rowshift-coordinator" --local --steps 150 --save "$tmp/$name" "$@" \
		>"$tmp/$name.out" 2>"$tmp/$name.err"
}

for model in examples/dlrm-small.json tests/data/train-model.json; do
	m=$(basename "$model" .json)
	run "$m-cpu" cpu --workers 2 --config "$model"
	check "$m: 2 CPU workers train 150 steps" test $? = 0
	run "$m-gpu" cuda --workers 2 --config "$model"
	check "$m: 2 GPU workers sharing the device train 150 steps" test $? = 0
	check "$m: the GPU workers said they used the device" grep -q "shards and kernels on cuda:0" "$tmp/$m-gpu.err"
	check "$m: GPU and CPU training reach the same weights (max_rel <= 1e-5)" \
		"$bin/rowshiftctl" checkpoint diff "$tmp/$m-cpu" "$tmp/$m-gpu" --max-rel 1e-5
done

# elastic on the GPU: 2 -> 3 at step 50 -> 2 at step 100, against the static GPU and CPU runs
model=examples/dlrm-small.json
run elastic cuda --workers 2 --config $model --schedule 50:3,100:2
check "a 2 -> 3 -> 2 run of GPU workers finishes" test $? = 0
check "it resharded twice and resumed at the same steps" bash -c \
	"grep -q 'generation 2 resumed at step 50' $tmp/elastic.out && grep -q 'generation 3 resumed at step 100' $tmp/elastic.out"
check "the bytes moved at each reshard are the plan diff's" moved_is_plan_diff "$tmp/elastic.out" 2
check "elastic GPU = static GPU (max_rel <= 1e-5)" \
	"$bin/rowshiftctl" checkpoint diff "$tmp/dlrm-small-gpu" "$tmp/elastic" --max-rel 1e-5
check "elastic GPU = static CPU (max_rel <= 1e-5)" \
	"$bin/rowshiftctl" checkpoint diff "$tmp/dlrm-small-cpu" "$tmp/elastic" --max-rel 1e-5
# the NCCL transport, at the one rank a GPU allows
run one-cpu cpu --workers 1 --config $model
check "1 CPU worker trains 150 steps" test $? = 0
TRANSPORT=nccl run one-nccl cuda --workers 1 --config $model
check "1 GPU worker on the NCCL transport trains 150 steps" test $? = 0
check "GPU + NCCL and CPU + TCP reach the same weights (max_rel <= 1e-5)" \
	"$bin/rowshiftctl" checkpoint diff "$tmp/one-cpu" "$tmp/one-nccl" --max-rel 1e-5
finish_checks train_gpu
