"""The PyTorch reference for bench_embedding: torch.nn.EmbeddingBag (sum,
sparse gradients) with an SGD step on the same shapes, one thread.
Prints seconds per forward + backward + step.
usage: torch_embedding_bag.py ROWS DIM BATCH POOLING ITERS"""
import sys
import time

import torch

rows, dim, batch, pool, iters = (int(a) for a in sys.argv[1:6])
torch.set_num_threads(1)
torch.manual_seed(0)
bag = torch.nn.EmbeddingBag(rows, dim, mode="sum", sparse=True)
opt = torch.optim.SGD(bag.parameters(), lr=0.01)
# Zipf(1.05)-like ids, scattered over the table
ranks = torch.distributions.Pareto(torch.tensor(1.0), torch.tensor(0.05)).sample((batch * pool,)).long()
ids = (ranks * 2654435761) % rows
offsets = torch.arange(0, batch * pool, pool)
grad = torch.rand(batch, dim) - 0.5
for _ in range(2):
    opt.zero_grad()
    bag(ids, offsets).backward(grad)
    opt.step()
t0 = time.perf_counter()
for _ in range(iters):
    opt.zero_grad()
    bag(ids, offsets).backward(grad)
    opt.step()
print((time.perf_counter() - t0) / iters)
