#!/bin/bash
# train_nccl.sh - one GPU worker on the NCCL transport (NCCL needs a GPU per
# rank: one rank here, sending to itself) reaches the weights of one CPU
# worker on TCP. Real GPU only: NCCL is not simulated (tests/cudasim).
# Exits 77 (skipped) when no CUDA device can be used.
set -u
. "$(dirname "$0")/../lib/itest.sh"

if ! dev=$("$bin/rowshift-worker" --device cuda --check-device 2>"$tmp/dev.err"); then
	echo "train_nccl: skipped: no CUDA device ($(tail -n 1 "$tmp/dev.err"))"
	exit 77
fi
echo "train_nccl: workers on $dev"

# run NAME DEVICE TRANSPORT ARGS...: a local job, saving its checkpoint in $tmp/NAME
run() {
	local name=$1 device=$2 transport=$3; shift 3
	ROWSHIFT_DEVICE=$device ROWSHIFT_TRANSPORT=$transport timeout 300 "$bin/rowshift-coordinator" --local --steps 150 \
		--save "$tmp/$name" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
}

model=examples/dlrm-small.json
run one-cpu cpu tcp --workers 1 --config $model
check "1 CPU worker trains 150 steps" test $? = 0
run one-nccl cuda nccl --workers 1 --config $model
check "1 GPU worker on the NCCL transport trains 150 steps" test $? = 0
check "GPU + NCCL and CPU + TCP reach the same weights (max_rel <= 1e-5)" \
	"$bin/rowshiftctl" checkpoint diff "$tmp/one-cpu" "$tmp/one-nccl" --max-rel 1e-5
finish_checks train_nccl
