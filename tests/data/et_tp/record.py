#!/usr/bin/python3
"""Records the et_tp fixtures: a Megatron-style tensor-parallel MLP on 4 gloo ranks, two variants.

Needs Debian's python3-torch 1.13 (CPU only, gloo, legacy autograd profiler, ExecutionGraphObserver):

    /usr/bin/python3 tests/data/et_tp/record.py

writes, for variant in a, b and rank r in 0..3,
    tests/data/et_tp/<variant>/rank-<r>.json.gz     legacy autograd-profiler chrome trace, steps 0..2
    tests/data/et_tp/<variant>/rank-<r>.et.json.gz  execution graph (schema 1.0.1) of step 1 only
    tests/data/et_tp/<variant>/truth.json
and then checks what it wrote (see check()); it exits non-zero if a check fails.

Per rank (t = 4, S = 16 tokens, H = 32 hidden, F = 64 ffn, float32):
    x  [S, H] requires_grad, the same on every rank (an activation from a previous layer)
    W1 [H, F/t] column-parallel shard, W2 [F/t, H] row-parallel shard (seeded by rank)
    ln = nn.LayerNorm(H) (replicated)
    h = gelu(CopyToTP(x) @ W1); y = ReduceFromTP(h @ W2)          # the row-parallel all-reduce of y
    A: out = ln(y.narrow(0, r*S/t, S/t) + x.narrow(0, r*S/t, S/t)) # every reader of y reads its shard
    B: out = ln((y + x).narrow(0, r*S/t, S/t))                     # aten::add reads the whole y
    loss = out.pow(2).mean(); loss.backward(); SGD(lr=0.01).step(); zero_grad; x.grad.zero_()
CopyToTP: forward identity, backward all_reduce(grad). ReduceFromTP: forward all_reduce(input) in
place and return it, backward identity. So each step does 2 all_reduces per rank (forward: y;
backward: the grad of x), both of S*H floats.
"""
import gzip
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD, S, H, F = 4, 16, 32, 64
STEPS = [0, 1, 2]
ET_STEP = 1


def gzip_to(src, dst):
    # mtime=0 and no file name in the header: the bytes depend only on the content
    with open(src, "rb") as f:
        data = f.read()
    with open(dst, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as g:
            g.write(data)


def worker(rank, variant, store_dir, out_dir, tmp_dir, result_q):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as fn
    from torch.profiler import ExecutionGraphObserver

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_dir}/store", rank=rank,
                            world_size=WORLD)
    t = WORLD
    calls = {"all_reduce": 0}

    def all_reduce(tensor):
        calls["all_reduce"] += 1
        dist.all_reduce(tensor)

    class CopyToTP(torch.autograd.Function):
        @staticmethod
        def forward(ctx, inp):
            return inp

        @staticmethod
        def backward(ctx, grad):
            all_reduce(grad)
            return grad

    class ReduceFromTP(torch.autograd.Function):
        @staticmethod
        def forward(ctx, inp):
            all_reduce(inp)
            return inp

        @staticmethod
        def backward(ctx, grad):
            return grad

    g = torch.Generator().manual_seed(1234)  # replicated tensors: same on every rank
    x = torch.randn(S, H, generator=g).requires_grad_(True)
    torch.manual_seed(1234)
    ln = torch.nn.LayerNorm(H)
    g = torch.Generator().manual_seed(1000 + rank)  # shards: different per rank
    w1 = (torch.randn(H, F // t, generator=g) * 0.1).requires_grad_(True)
    w2 = (torch.randn(F // t, H, generator=g) * 0.1).requires_grad_(True)
    opt = torch.optim.SGD([w1, w2, ln.weight, ln.bias], lr=0.01)
    lo, n = rank * S // t, S // t

    et_path = os.path.join(tmp_dir, f"{variant}-rank-{rank}.et.json")
    trace_path = os.path.join(tmp_dir, f"{variant}-rank-{rank}.json")
    per_step = []
    dist.barrier()  # start together, so the sleeps below are what staggers the profilers
    time.sleep(rank * 0.003)
    with torch.autograd.profiler.profile() as prof:
        for k in STEPS:
            with torch.autograd.profiler.record_function(f"ProfilerStep#{k}"):
                eg = None
                if k == ET_STEP:
                    eg = ExecutionGraphObserver()
                    eg.register_callback(et_path)
                    eg.start()
                before = calls["all_reduce"]
                h = fn.gelu(CopyToTP.apply(x) @ w1)
                y = ReduceFromTP.apply(h @ w2)
                if variant == "a":
                    ys = y.narrow(0, lo, n)
                    xs = x.narrow(0, lo, n)
                    out = ln(ys + xs)
                else:
                    z = y + x
                    out = ln(z.narrow(0, lo, n))
                loss = out.pow(2).mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                x.grad.zero_()
                per_step.append(calls["all_reduce"] - before)
                if eg is not None:
                    eg.stop()
                    eg.unregister_callback()
    prof.export_chrome_trace(trace_path)
    gzip_to(trace_path, os.path.join(out_dir, f"rank-{rank}.json.gz"))
    gzip_to(et_path, os.path.join(out_dir, f"rank-{rank}.et.json.gz"))
    dist.barrier()
    dist.destroy_process_group()
    result_q.put((rank, per_step, float(loss)))


def record(variant):
    import torch.multiprocessing as mp

    out_dir = os.path.join(HERE, variant)
    os.makedirs(out_dir, exist_ok=True)
    for name in os.listdir(out_dir):
        if name.startswith("rank-"):
            os.remove(os.path.join(out_dir, name))
    tmp = tempfile.mkdtemp(prefix=f"et_tp_{variant}_")
    try:
        ctx = mp.get_context("spawn")
        q = ctx.SimpleQueue()
        procs = [ctx.Process(target=worker, args=(r, variant, tmp, out_dir, tmp, q))
                 for r in range(WORLD)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        if any(p.exitcode != 0 for p in procs):
            sys.exit(f"variant {variant}: a rank failed: {[p.exitcode for p in procs]}")
        results = sorted(q.get() for _ in range(WORLD))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    counts = {c for _, per_step, _ in results for c in per_step}
    if len(counts) != 1:
        sys.exit(f"variant {variant}: all_reduce calls per step differ: {results}")
    per_step = counts.pop()
    truth = {
        "variant": variant,
        "ranks": WORLD,
        "S": S,
        "H": H,
        "F": F,
        "dtype": "float32",
        "steps": STEPS,
        "et_step": ET_STEP,
        "collectives_per_step": per_step,
        "collectives": [
            {"order": 0, "phase": "forward", "op": "c10d::allreduce_", "what": "y (row-parallel output)",
             "numel": S * H},
            {"order": 1, "phase": "backward", "op": "c10d::allreduce_", "what": "grad of x (CopyToTP)",
             "numel": S * H},
        ],
        "y_numel": S * H,
        "y_shard_numel": S * H // WORLD,
        "y_shard_offset_elems": [r * (S // WORLD) * H for r in range(WORLD)],
        "y_reader": "aten::add",
        "y_reader_reads": "shard" if variant == "a" else "whole",
        "profiler_start_stagger_ms": [3 * r for r in range(WORLD)],
        "expect": {
            "tp_sp_forward_all_reduce": "applied" if variant == "a" else "rejected",
            "rejected_by": None if variant == "a" else "aten::add",
        },
    }
    with open(os.path.join(out_dir, "truth.json"), "w") as f:
        json.dump(truth, f, indent=2)
        f.write("\n")
    return truth


VIEW_OPS = {"aten::narrow", "aten::slice", "aten::as_strided", "aten::view", "aten::view_as",
            "aten::alias", "aten::detach", "aten::t", "aten::transpose", "aten::expand",
            "aten::reshape", "aten::_reshape_alias", "aten::select"}


def tensors(value):
    """The [tensor id, storage id, offset, numel, itemsize, device] lists inside an ET value."""
    if isinstance(value, list):
        if len(value) == 6 and all(isinstance(v, int) for v in value[:5]) and isinstance(value[5], str):
            yield value
        else:
            for v in value:
                yield from tensors(v)


def check(variant, truth):
    out_dir = os.path.join(HERE, variant)
    n_shard, failures = S * H // WORLD, []
    for r in range(WORLD):
        with gzip.open(os.path.join(out_dir, f"rank-{r}.json.gz")) as f:
            events = json.load(f)
        steps = [e for e in events if e["name"].startswith("ProfilerStep#")]
        c10d = [e for e in events if e["name"] == "c10d::allreduce_"]
        glo = [e for e in events if e["name"] == "gloo:all_reduce"]
        if len(steps) != len(STEPS) or len(c10d) != len(STEPS) * truth["collectives_per_step"] \
                or len(glo) != len(c10d):
            failures.append(f"{variant} rank {r}: trace has {len(steps)} steps, {len(c10d)} "
                            f"c10d::allreduce_, {len(glo)} gloo:all_reduce")

        with gzip.open(os.path.join(out_dir, f"rank-{r}.et.json.gz")) as f:
            et = json.load(f)
        nodes = sorted(et["nodes"], key=lambda nd: nd["id"])
        if et["schema"] != "1.0.1":
            failures.append(f"{variant} rank {r}: schema {et['schema']}")
        ars = [nd for nd in nodes if nd["name"] == "c10d::allreduce_"]
        if len(ars) != truth["collectives_per_step"] or \
                any([t[3] for t in tensors(nd["inputs"])] != [S * H] for nd in ars):
            failures.append(f"{variant} rank {r}: ET c10d::allreduce_ nodes {len(ars)}, "
                            f"tensors {[list(tensors(nd['inputs'])) for nd in ars]}")
            continue
        first = ars[0]
        y_storage = next(tensors(first["inputs"]))[1]
        # forward only: the backward is the first autograd::engine node on
        bwd = min(nd["id"] for nd in nodes if nd["name"].startswith("autograd::engine"))
        readers = [nd for nd in nodes if first["id"] < nd["id"] < bwd
                   and nd["name"] not in VIEW_OPS and not nd["name"].startswith(("gloo:", "c10d::"))
                   and any(t[1] == y_storage for t in tensors(nd["inputs"]))]
        # the readers' own nested calls (children) carry the same tensors; keep the outermost
        ids = {nd["id"] for nd in readers}
        readers = [nd for nd in readers if nd["parent"] not in ids]
        names = [nd["name"] for nd in readers]
        if names != ["aten::add"]:
            failures.append(f"{variant} rank {r}: readers of y's storage {y_storage}: {names}")
            continue
        read = [t for t in tensors(readers[0]["inputs"]) if t[1] == y_storage][0]
        want = (S * H, 0) if variant == "b" else (n_shard, r * (S // WORLD) * H)
        if (read[3], read[2]) != want:
            failures.append(f"{variant} rank {r}: aten::add reads numel {read[3]} at offset "
                            f"{read[2]}, want {want}")
    return failures


def main():
    t0 = time.time()
    failures = []
    for variant in ("a", "b"):
        truth = record(variant)
        failures += check(variant, truth)
    if failures:
        print("\n".join(failures), file=sys.stderr)
        sys.exit(1)
    print(f"et_tp: wrote and checked a/ and b/ in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
