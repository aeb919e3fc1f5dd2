#!/bin/bash
# bench_torch_cuda.sh - torch.nn.EmbeddingBag on the GPU (sum pooling, fp32)
# on bench_embedding_cuda's shapes (2,000,000 rows, 65,536 bags of 20
# Zipf-like ids, dims 64 and 128), beside rowshift's forward from the same
# `make bench-gpu` run (bench_embedding_cuda runs first and leaves its
# figures in $BUILD/bench/). Skipped (77) without a device or without
# PyTorch built with CUDA.
set -u
BUILD=${BUILD:-build}
if ! dev=$("$BUILD/bin/rowshift-worker" --device cuda --check-device 2>&1); then
	echo "bench_torch_cuda: skipped: no CUDA device ($(echo "$dev" | tail -n 1))"
	exit 77
fi
if ! python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	echo "bench_torch_cuda: skipped: no PyTorch with CUDA here (python3-torch): no torch ratio"
	exit 77
fi
ours="$BUILD/bench/bench_embedding_cuda.txt"
for dim in 64 128; do
	fwd=$(python3 tests/bench/torch_embedding_bag.py 2000000 $dim 65536 20 20 cuda forward) || exit 1
	step=$(python3 tests/bench/torch_embedding_bag.py 2000000 $dim 65536 20 20 cuda) || exit 1
	mine=$(sed -n "s/^bench embedding_cuda_fwd_dim$dim: .*(\([0-9.]*\) ms.*/\1/p" "$ours" 2>/dev/null)
	python3 - "$dim" "$fwd" "$step" "${mine:-}" <<'PY'
import sys
dim, fwd, step, mine = sys.argv[1], float(sys.argv[2]) * 1e3, float(sys.argv[3]) * 1e3, sys.argv[4]
line = "bench torch_embedding_bag_cuda_dim%s: forward %.3f ms, forward + backward + sparse SGD %.3f ms" % (dim, fwd, step)
if mine:
    line += " | rowshift forward %.3f ms: %.2fx torch's speed" % (float(mine), fwd / float(mine))
else:
    line += " | no rowshift figure (run bench_embedding_cuda first)"
print(line)
PY
done
