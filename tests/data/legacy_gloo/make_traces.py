#!/usr/bin/env python3
"""Writes the legacy-format (non-Kineto) profiler traces of this folder.

PyTorch built without Kineto (Debian 12's python3-torch 1.13 is one) writes the legacy
autograd-profiler JSON: a bare array of complete events without "cat", pid "CPU functions" on
every rank, per-rank relative timestamps, the rank only in the file name. This runs a small data-
parallel job on 3 gloo ranks for 4 steps (ProfilerStep#0..3, as torch.profiler names them): each
step a matrix product, then an all-reduce of the "gradients"; step 0 also broadcasts the weights.
Rank 2 is a planted straggler: in step 2 it sleeps 30 ms before its all-reduce, so the others
wait for it there.

    apt-get install python3-torch
    /usr/bin/python3 tests/data/legacy_gloo/make_traces.py tests/data/legacy_gloo

writes rank-0.json, rank-1.json, rank-2.json.
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 3
STEPS = 4
STRAGGLER_RANK, STRAGGLER_STEP, STRAGGLER_SLEEP_S = 2, 2, 0.030


def worker(rank, out_dir, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    w = torch.ones(64, 64)
    grad = torch.ones(4096)
    dist.barrier()  # start together; not profiled
    with torch.autograd.profiler.profile() as prof:
        for step in range(STEPS):
            with torch.autograd.profiler.record_function(f"ProfilerStep#{step}"):
                if step == 0:
                    dist.broadcast(w, src=0)
                y = torch.mm(w, w)
                grad += y.sum()
                if rank == STRAGGLER_RANK and step == STRAGGLER_STEP:
                    time.sleep(STRAGGLER_SLEEP_S)
                dist.all_reduce(grad)
    prof.export_chrome_trace(os.path.join(out_dir, f"rank-{rank}.json"))
    dist.destroy_process_group()


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    mp.spawn(worker, args=(out, 29500 + os.getpid() % 1000), nprocs=WORLD)
