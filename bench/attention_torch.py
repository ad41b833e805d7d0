#!/usr/bin/python3
"""PyTorch 1.13 baseline for bench/bench_attention.cpp: softmax(Q K^T / sqrt(d) + mask) V with
autograd, batch 1, 8 heads, head width 64, causal, float32, 2 threads. Prints one line per case:
  torch <fwd|fwdbwd> N=<N> ms=<median milliseconds>
N = 16k and 32k are skipped: the materialised 8 x N x N scores, probabilities and their gradients
(4+ copies of 8 GiB at 16k, four times that at 32k) need more memory than a benchmark run may
take."""
import sys
import time

import torch

torch.set_num_threads(2)
H, D = 8, 64


def run(n, backward, reps):
    g = torch.Generator().manual_seed(0)
    q = (torch.rand(1, H, n, D, generator=g) * 2 - 1).requires_grad_(backward)
    k = (torch.rand(1, H, n, D, generator=g) * 2 - 1).requires_grad_(backward)
    v = (torch.rand(1, H, n, D, generator=g) * 2 - 1).requires_grad_(backward)
    dout = torch.rand(1, H, n, D, generator=g) * 2 - 1
    mask = torch.full((n, n), float("-inf")).triu(1)
    scale = 1.0 / D ** 0.5

    def step():
        if backward:
            for t in (q, k, v):
                t.grad = None
            s = torch.matmul(q, k.transpose(-1, -2)) * scale + mask
            o = torch.matmul(torch.softmax(s, dim=-1), v)
            o.backward(dout)
        else:
            with torch.no_grad():
                s = torch.matmul(q, k.transpose(-1, -2)) * scale + mask
                torch.matmul(torch.softmax(s, dim=-1), v)

    step()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2] * 1e3


def main():
    sizes = [int(x) for x in sys.argv[1:]] or [1024, 4096]
    for n in sizes:
        reps = 5 if n <= 1024 else 3
        for backward in (False, True):
            ms = run(n, backward, reps)
            print(f"torch {'fwdbwd' if backward else 'fwd'} N={n} ms={ms:.3f}", flush=True)


if __name__ == "__main__":
    main()
