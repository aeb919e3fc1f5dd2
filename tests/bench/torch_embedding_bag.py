"""The PyTorch reference for bench_embedding (CPU, one thread) and
bench_torch_cuda.sh (GPU): torch.nn.EmbeddingBag (sum, sparse gradients)
with an SGD step on the same shapes. Prints seconds per forward + backward
+ step, or per forward alone with MODE=forward.
usage: torch_embedding_bag.py ROWS DIM BATCH POOLING ITERS [DEVICE [MODE]]"""
import sys
import time

import torch

rows, dim, batch, pool, iters = (int(a) for a in sys.argv[1:6])
device = sys.argv[6] if len(sys.argv) > 6 else "cpu"
forward_only = len(sys.argv) > 7 and sys.argv[7] == "forward"
torch.set_num_threads(1)
torch.manual_seed(0)
bag = torch.nn.EmbeddingBag(rows, dim, mode="sum", sparse=True).to(device)
opt = torch.optim.SGD(bag.parameters(), lr=0.01)
# Zipf(1.05)-like ids, scattered over the table
ranks = torch.distributions.Pareto(torch.tensor(1.0), torch.tensor(0.05)).sample((batch * pool,)).long()
ids = ((ranks * 2654435761) % rows).to(device)
offsets = torch.arange(0, batch * pool, pool).to(device)
grad = (torch.rand(batch, dim) - 0.5).to(device)


def one():
    if forward_only:
        with torch.no_grad():
            bag(ids, offsets)
        return
    opt.zero_grad()
    bag(ids, offsets).backward(grad)
    opt.step()


def sync():
    if device != "cpu":
        torch.cuda.synchronize()


for _ in range(2):
    one()
sync()
t0 = time.perf_counter()
for _ in range(iters):
    one()
sync()
print((time.perf_counter() - t0) / iters)
