#!/usr/bin/env python3
"""Capture overhead of a PyTorch training step (bench/capture_overhead.sh runs it without
capture, under `braid record`, and with torch.profiler, interleaved).

Usage: capture_torch_step.py {launch,compute} STEPS [--torch-profiler]
  launch   launch-bound: 12 small linear layers on a batch of 8, an all_reduce of each layer's
           gradient (NCCL, one rank): ~90 small kernels and ~20 NCCL calls per step
  compute  compute-bound: 4 linear layers of 8192x8192 on a batch of 4096, one all_reduce
Prints one line per step after 10 warm-up steps: "<workload> <ms>" (the summarizer takes the
median). With --torch-profiler the steps run inside torch.profiler.profile(CPU+CUDA).
"""
import os
import sys
import time


def main():
    import torch
    import torch.distributed as dist

    kind, steps = sys.argv[1], int(sys.argv[2])
    with_profiler = "--torch-profiler" in sys.argv[3:]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1)
    dev = torch.device("cuda", 0)
    if kind == "launch":
        layers = [torch.nn.Linear(64, 64).to(dev) for _ in range(12)]
        x = torch.randn(8, 64, device=dev)
    else:
        layers = [torch.nn.Linear(8192, 8192).to(dev) for _ in range(4)]
        x = torch.randn(4096, 8192, device=dev)
    params = [p for l in layers for p in l.parameters()]
    opt = torch.optim.SGD(params, lr=1e-3)

    def step(i):
        torch.cuda.nvtx.range_push(f"step {i}")
        y = x
        for l in layers:
            y = torch.relu(l(y))
        y.sum().backward()
        if kind == "launch":
            for p in params:
                dist.all_reduce(p.grad)
        else:
            flat = torch.cat([p.grad.flatten() for p in params])
            dist.all_reduce(flat)
        opt.step()
        opt.zero_grad()
        torch.cuda.nvtx.range_pop()

    def run(n, report):
        for i in range(n):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step(i)
            torch.cuda.synchronize()
            if report:
                print(f"{kind}_step {1000 * (time.perf_counter() - t0):.3f}", flush=True)

    run(10, False)
    if with_profiler:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            run(steps, True)
    else:
        run(steps, True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
