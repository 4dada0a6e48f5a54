#!/usr/bin/python3
"""Records the gloo_straggler fixtures: 8 gloo ranks x 20 steps, two planted stragglers, staggered
profiler starts, legacy autograd-profiler traces.

Needs Debian's python3-torch 1.13 (CPU only, gloo, legacy profiler, no Kineto):

    /usr/bin/python3 tests/data/gloo_straggler/record.py

writes tests/data/gloo_straggler/rank-<r>.json.gz (r = 0..7) and truth.json, then checks them
(see check()) and exits non-zero if a check fails.

Each step (in record_function("ProfilerStep#<k>"), k = 0..19) does a little compute (matrix
products) and then exactly 5 collectives, in this order (see OPS): all_reduce of 1024 floats,
broadcast of 256 floats from rank 0, all_gather of 128 floats per rank, reduce of 2048 floats to
rank 0, all_reduce of 4096 floats. Planted stragglers: rank 3 sleeps 25 ms right before the first
collective of step 7, rank 6 right before the first collective of step 14; the other ranks wait
for it in that all_reduce. Profiler starts are staggered: after a barrier, rank r sleeps r*37 ms,
takes time.time_ns() and enters the profiler, so each rank's relative timestamps have their own
origin; truth.json holds those start times and their offsets from rank 0.
"""
import gzip
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD = 8
STEPS = 20
STAGGER_MS = 37
GO_MARGIN_MS = 60
STRAGGLERS = [{"step": 7, "rank": 3, "delay_ms": 25}, {"step": 14, "rank": 6, "delay_ms": 25}]
# (python call, c10d op in the trace, gloo event in the trace, elements, extra)
OPS = [
    {"call": "all_reduce", "c10d": "c10d::allreduce_", "gloo": "gloo:all_reduce", "numel": 1024},
    {"call": "broadcast", "c10d": "c10d::broadcast_", "gloo": "gloo:broadcast", "numel": 256,
     "src": 0},
    {"call": "all_gather", "c10d": "c10d::allgather_", "gloo": "gloo:all_gather", "numel": 128,
     "numel_out": 128 * WORLD},
    {"call": "reduce", "c10d": "c10d::reduce_", "gloo": "gloo:reduce", "numel": 2048, "dst": 0},
    {"call": "all_reduce", "c10d": "c10d::allreduce_", "gloo": "gloo:all_reduce", "numel": 4096},
]


def gzip_to(src, dst):
    with open(src, "rb") as f:
        data = f.read()
    with open(dst, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as g:
            g.write(data)


def worker(rank, store_dir, tmp_dir, result_q):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_dir}/store", rank=rank,
                            world_size=WORLD)
    g = torch.Generator().manual_seed(rank)
    a = torch.randn(96, 96, generator=g) * 0.1
    b = torch.randn(96, 96, generator=g) * 0.1
    bufs = [torch.zeros(op["numel"]) for op in OPS]
    gathered = [torch.zeros(OPS[2]["numel"]) for _ in range(WORLD)]
    delay = {s["step"]: s["delay_ms"] / 1000 for s in STRAGGLERS if s["rank"] == rank}

    # Start together, so the sleep is what staggers the profilers; rank 0 also names a common
    # wall-clock time at which every rank begins step 0, so that the stagger moves only the
    # traces' time origins and not the steps (else step 0's first collective would show rank 7
    # 259 ms late). Waiting for it is a sleep, which the profiler does not record.
    dist.barrier()
    go = torch.tensor([time.time_ns() + (WORLD * STAGGER_MS + GO_MARGIN_MS) * 1_000_000],
                      dtype=torch.int64)
    dist.broadcast(go, src=0)
    go_ns = int(go.item())
    time.sleep(rank * STAGGER_MS / 1000)
    start_ns = time.time_ns()
    with torch.autograd.profiler.profile() as prof:
        entered_ns = time.time_ns()
        time.sleep(max(0, go_ns - time.time_ns()) / 1e9)
        for k in range(STEPS):
            with torch.autograd.profiler.record_function(f"ProfilerStep#{k}"):
                c = a
                for _ in range(4):
                    c = torch.tanh(c @ b)
                s = c.sum()
                for buf in bufs:
                    buf.fill_(float(s) + rank)
                if k in delay:
                    time.sleep(delay[k])
                dist.all_reduce(bufs[0])
                dist.broadcast(bufs[1], src=OPS[1]["src"])
                dist.all_gather(gathered, bufs[2])
                dist.reduce(bufs[3], dst=OPS[3]["dst"])
                dist.all_reduce(bufs[4])
    trace = os.path.join(tmp_dir, f"rank-{rank}.json")
    prof.export_chrome_trace(trace)
    gzip_to(trace, os.path.join(HERE, f"rank-{rank}.json.gz"))
    dist.barrier()
    dist.destroy_process_group()
    result_q.put((rank, start_ns, go_ns, entered_ns))


def record():
    import torch.multiprocessing as mp

    for name in os.listdir(HERE):
        if name.startswith("rank-"):
            os.remove(os.path.join(HERE, name))
    tmp = tempfile.mkdtemp(prefix="gloo_straggler_")
    try:
        ctx = mp.get_context("spawn")
        q = ctx.SimpleQueue()
        procs = [ctx.Process(target=worker, args=(r, tmp, tmp, q)) for r in range(WORLD)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        if any(p.exitcode != 0 for p in procs):
            sys.exit(f"a rank failed: {[p.exitcode for p in procs]}")
        results = sorted(q.get() for _ in range(WORLD))
        starts = [res[1] for res in results]
        go_ns = results[0][2]
        entered = [res[3] for res in results]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    truth = {
        "ranks": WORLD,
        "steps": STEPS,
        "collectives_per_step": len(OPS),
        "ops": [dict(op, dtype="float32", order=i) for i, op in enumerate(OPS)],
        "stragglers": STRAGGLERS,
        "straggler_sleep_before": "the first collective of the step (ops[0], all_reduce of 1024)",
        "profiler_stagger_ms": [r * STAGGER_MS for r in range(WORLD)],
        "profiler_start_ns": starts,
        "profiler_entered_ns": entered,
        "profiler_entered_note": "time.time_ns() taken first thing inside the profile context: "
                                 "each rank's time origin lies between profiler_start_ns and this",
        "step0_go_ns": go_ns,
        "step0_go_note": "every rank sleeps inside its profiler until this time.time_ns() (named "
                         "by rank 0) and then begins ProfilerStep#0, so the steps are aligned in "
                         "real time; the time before step 0 is an empty stretch of each trace.",
        "offset_vs_rank0_ns": [s - starts[0] for s in starts],
        "offset_note": "start_r - start_0 from time.time_ns() taken just before entering each "
                       "rank's profiler (one host clock, read to ~0.1 ms). Each trace's own time "
                       "origin lies between profiler_start_ns and profiler_entered_ns (entering "
                       "the legacy profiler takes ~0.2-0.4 ms). A rank-r ts maps to rank 0's "
                       "clock as ts + offset_vs_rank0_ns[r]/1000 µs.",
    }
    return truth


def check(truth):
    """Checks the traces against truth; returns (failures, what it measured)."""
    measured = {"note": "measured from the traces by record.py's check, on rank 0's clock "
                        "(offset_vs_rank0_ns applied); the recording host was loaded, "
                        "8 ranks sharing 2 cores"}
    failures, ends = [], {}  # ends[(step, op)] = [end in rank 0's clock, µs, per rank]
    arrive = {}  # arrive[step] = [start of the step's first c10d op in rank 0's clock, µs, per rank]
    for r in range(WORLD):
        with gzip.open(os.path.join(HERE, f"rank-{r}.json.gz")) as f:
            events = json.load(f)
        steps = sorted((e for e in events if e["name"].startswith("ProfilerStep#")),
                       key=lambda e: e["ts"])
        if [e["name"] for e in steps] != [f"ProfilerStep#{k}" for k in range(STEPS)]:
            failures.append(f"rank {r}: steps {[e['name'] for e in steps]}")
            continue
        main_tid = steps[0]["tid"]
        c10d = sorted((e for e in events if e["name"].startswith("c10d::")), key=lambda e: e["ts"])
        glo = sorted((e for e in events if e["name"].startswith("gloo:")), key=lambda e: e["ts"])
        if any(e["tid"] != main_tid for e in c10d) or any(e["tid"] == main_tid for e in glo):
            failures.append(f"rank {r}: c10d ops off the main thread or gloo events on it")
        for k, st in enumerate(steps):
            lo, hi = st["ts"], st["ts"] + st["dur"]
            cs = [e["name"] for e in c10d if lo <= e["ts"] <= hi]
            gs = [e for e in glo if lo <= e["ts"] <= hi]
            if cs != [op["c10d"] for op in OPS] or [e["name"] for e in gs] != [op["gloo"] for op in OPS]:
                failures.append(f"rank {r} step {k}: c10d {cs}, gloo {[e['name'] for e in gs]}")
                continue
            first = next(e for e in c10d if lo <= e["ts"] <= hi)
            arrive.setdefault(k, [None] * WORLD)[r] = first["ts"] + truth["offset_vs_rank0_ns"][r] / 1000
            for i, e in enumerate(gs):
                ends.setdefault((k, i), [None] * WORLD)[r] = \
                    e["ts"] + e["dur"] + truth["offset_vs_rank0_ns"][r] / 1000
            # every other rank waits for the straggler in the first collective of its step
            for s in truth["stragglers"]:
                if s["step"] == k and r != s["rank"] and gs[0]["dur"] < s["delay_ms"] * 1000 * 0.5:
                    failures.append(f"rank {r} step {k}: {gs[0]['name']} took {gs[0]['dur']} µs, "
                                    f"not waiting for straggler rank {s['rank']}")
    # the planted straggler is the last to reach its step's first collective
    lateness = {k: [a - min(v) for a in v] for k, v in arrive.items() if None not in v}
    planted = {s["step"]: s["rank"] for s in truth["stragglers"]}
    for k, late in sorted(lateness.items()):
        if k in planted:
            r = planted[k]
            runner_up = max(x for i, x in enumerate(late) if i != r)
            print(f"gloo_straggler: step {k}: rank {r} reaches the first collective "
                  f"{late[r] / 1000:.1f} ms after the earliest rank, the next latest "
                  f"{runner_up / 1000:.1f} ms")
            measured[f"step{k}_straggler_late_ms"] = round(late[r] / 1000, 1)
            measured[f"step{k}_next_latest_ms"] = round(runner_up / 1000, 1)
            if late[r] <= runner_up:
                failures.append(f"step {k}: planted straggler rank {r} is not the latest: {late}")
    others = [max(v) for k, v in lateness.items() if k not in planted]
    if others:
        measured["other_steps_latest_arrival_ms"] = {
            "median": round(statistics.median(others) / 1000, 1), "max": round(max(others) / 1000, 1)}
        print(f"gloo_straggler: other steps: latest arrival after the earliest, median "
              f"{statistics.median(others) / 1000:.1f} ms, max {max(others) / 1000:.1f} ms")
    # with the true offsets applied, a collective ends at about the same time on every rank
    spreads = [max(v) - min(v) for v in ends.values() if None not in v]
    if spreads:
        measured["collective_end_spread_us"] = {
            "median": round(statistics.median(spreads)), "max": round(max(spreads))}
        print(f"gloo_straggler: end-time spread of a collective across ranks on rank 0's clock: "
              f"median {statistics.median(spreads):.0f} µs, max {max(spreads):.0f} µs")
    return failures, measured


def main():
    t0 = time.time()
    truth = record()
    failures, truth["measured"] = check(truth)
    with open(os.path.join(HERE, "truth.json"), "w") as f:
        json.dump(truth, f, indent=2)
        f.write("\n")
    if failures:
        print("\n".join(failures), file=sys.stderr)
        sys.exit(1)
    print(f"gloo_straggler: wrote and checked 8 ranks in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
