"""Step time and bytes exchanged per step of refinement (stage ``refine``) with
``refine.optimizer = "sparse"`` (lazy Adam on the rows a batch touches, only those rows
exchanged) and ``"dense"`` (Adam on the whole V x d matrix, its gradient all_reduced), as the
vocabulary grows, for 1 and 2 workers.

    python benchmarks/bench_refine_sparse.py --json out/bench_refine_sparse.json
    python benchmarks/bench_refine_sparse.py --vocab 50000 2000000 --workers 2 --optimizers sparse
    python benchmarks/bench_refine_sparse.py --smoke   # V = 5,000, d = 32, 1 worker, 3 steps

Needs the pipeline extra (torch) and nothing else: no Ray, no data, no teacher. The matrix is
synthetic (V x ``--dim`` random rows); every step's global batch is ``--pairs`` translation
pairs (objective ``contrastive``, τ = 0.05, clip 5, lr 1e-3), each side 8 to 22 words (mean
15) drawn from a Zipf law over the V rows (rank r with probability ∝ 1 / r^``--zipf``), the same
batches for every V, worker count and optimiser. Each configuration runs in fresh processes
(its peak RSS is its own): 1 worker in one process; 2 workers as 2 local processes joined by
``torch.distributed`` over gloo (as Ray Train's ``TorchTrainer`` joins its workers on CPU), each
taking half of every batch, and calling the trainer's own step
(``swe.build.training.trainer.train_step``:
the in-batch negatives gathered over both, then the gradient exchanged). Reported per
configuration:

* ``step_ms``: the median wall time of ``train_step`` over ``--steps`` steps after ``--warmup``
  (no evaluation or checkpoint in them: the benchmark makes none; collation is not timed);
  ``cpu_ms``: the median CPU time of rank 0's process in those steps (on a shared machine the
  steadier of the two; it leaves out time spent waiting for the other worker);
* ``bytes_per_step``: bytes of the tensors one worker passes to collectives in a step (median;
  ``all_gather`` and ``all_reduce`` inputs: the counts, the gathered sentence vectors, and the
  gradient exchange); 0 for 1 worker. gloo's ring all_reduce moves about 2 (w-1)/w times its
  input per worker, an all_gather receives (w-1) times its input;
* ``rows``: distinct rows one worker's half-batch touches (mean), ``union``: distinct rows of
  the global batch (mean; what sparse Adam updates);
* ``peak_rss_gib``: the largest peak RSS of the configuration's processes.

A configuration whose estimated memory (per worker 3 V x d float32 matrices under sparse:
weight and moments; 5 under dense: also the gradient and Adam's temporary) exceeds
``--max-gib`` (default 80% of the memory available when it would start) is skipped and
listed.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _smoke import parse

SMOKE = {"vocab": [5000], "dim": 32, "pairs": 16, "workers": [1], "steps": 3, "warmup": 1}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--vocab", type=int, nargs="+", default=[50_000, 500_000, 2_000_000],
                   help="vocabulary sizes V")
    p.add_argument("--dim", type=int, default=256, help="dimension d of the rows")
    p.add_argument("--pairs", type=int, default=128, help="pairs per global batch")
    p.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent of the word draws")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2], choices=[1, 2],
                   help="worker counts")
    p.add_argument("--optimizers", nargs="+", default=["sparse", "dense"],
                   choices=["sparse", "dense"], help="refine.optimizer values")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--threads", type=int, default=1, help="torch threads per worker (Ray "
                   "Train's default: refine.cpus_per_worker = 1)")
    p.add_argument("--device", default="cpu", help="cpu, or cuda (1 worker: the matrix, its "
                   "Adam moments and the step on that GPU)")
    p.add_argument("--max-gib", type=float, help="skip configurations estimated above this")
    p.add_argument("--json", type=Path, help="write the rows here")
    p.add_argument("--smoke", action="store_true", help=f"a tiny run in this process: {SMOKE}")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # internal: one worker's JSON spec
    return p


# -- one worker -----------------------------------------------------------------------------------


def _batch(spec: dict, step: int, rank: int, cdf) -> dict:
    """This worker's share of step ``step``'s global batch (the same for every configuration)."""
    import numpy as np
    import torch

    rng = np.random.default_rng([spec["seed"], step])
    per = spec["pairs"] // spec["world"]
    out: dict = {"rows": per}
    for side in ("src", "tgt"):
        lengths = rng.integers(8, 23, spec["pairs"])
        ids = np.minimum(np.searchsorted(cdf, rng.random(int(lengths.sum()))), len(cdf) - 1)
        starts = np.cumsum(lengths) - lengths
        lo = starts[rank * per]
        hi = starts[(rank + 1) * per - 1] + lengths[(rank + 1) * per - 1]
        offsets = starts[rank * per:(rank + 1) * per] - lo
        out[side] = (torch.from_numpy(ids[lo:hi].astype(np.int64)),
                     torch.from_numpy(offsets.astype(np.int64)))
        out.setdefault("union", set()).update(ids.tolist())
    return out


def _worker(spec: dict) -> dict:
    """Train ``warmup + steps`` steps; the timings, bytes and rows of this worker."""
    import resource

    import numpy as np
    import torch
    import torch.distributed as dist

    from swe.build.stages.refine import RefineConfig
    from swe.build.training.trainer import RowAdam, TrainJob, train_step

    threads = torch.get_num_threads()
    torch.set_num_threads(spec["threads"])
    rank, world = spec["rank"], spec["world"]
    sent = [0]
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{spec['port']}",
                                rank=rank, world_size=world)
        gather, reduce = dist.all_gather, dist.all_reduce

        def counted_gather(bufs, x, *a, **k):
            sent[0] += x.nbytes
            return gather(bufs, x, *a, **k)

        def counted_reduce(x, *a, **k):
            sent[0] += x.nbytes
            return reduce(x, *a, **k)

        dist.all_gather, dist.all_reduce = counted_gather, counted_reduce
    try:
        ranks = np.arange(1, spec["vocab"] + 1, dtype=np.float64) ** -spec["zipf"]
        cdf = np.cumsum(ranks) / ranks.sum()
        g = torch.Generator().manual_seed(0)
        weight = torch.nn.Parameter(torch.empty(spec["vocab"], spec["dim"]).normal_(
            0, 0.1, generator=g).to(spec.get("device", "cpu")))
        adam = RowAdam if spec["optimizer"] == "sparse" else torch.optim.Adam
        opt = adam([weight], lr=1e-3)
        job = TrainJob(RefineConfig(objective="contrastive", optimizer=spec["optimizer"],
                                    max_steps=10**9), "", 0, 0, world=world)
        seconds, cpu, sent_bytes, rows, union = [], [], [], [], []
        for step in range(spec["warmup"] + spec["steps"]):
            batch = _batch(spec, step, rank, cdf)
            union.append(len(batch.pop("union")))
            rows.append(len(set(batch["src"][0].tolist()) | set(batch["tgt"][0].tolist())))
            sent[0] = 0
            t, c = time.perf_counter(), time.process_time()
            train_step(job, {"weight": weight}, opt, batch, rank, step)
            if step >= spec["warmup"]:
                seconds.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
                sent_bytes.append(sent[0])
    finally:
        if world > 1:
            dist.all_gather, dist.all_reduce = gather, reduce
            dist.destroy_process_group()
        torch.set_num_threads(threads)
    return {"step_ms": round(1000 * statistics.median(seconds), 2),
            "cpu_ms": round(1000 * statistics.median(cpu), 2),
            "bytes_per_step": int(statistics.median(sent_bytes)),
            "rows": round(statistics.mean(rows)), "union": round(statistics.mean(union)),
            "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}


# -- the driver -----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes(spec: dict) -> dict:
    """Run one configuration in ``world`` fresh processes; rank 0's row, the peak RSS of all."""
    port = _free_port()
    procs = [subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--worker",
         json.dumps({**spec, "rank": rank, "port": port})],
        stdout=subprocess.PIPE, text=True) for rank in range(spec["world"])]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a worker failed: {[p.returncode for p in procs]}")
    rows = [json.loads(out.strip().splitlines()[-1]) for out in outs]
    return {**rows[0], "peak_rss_gib": max(r["peak_rss_gib"] for r in rows)}


def _available_gib() -> float:
    with open("/proc/meminfo") as f:
        info = {line.split(":")[0]: line.split()[1] for line in f}
    return int(info["MemAvailable"]) / 2**20


def _estimate_gib(vocab: int, dim: int, world: int, optimizer: str) -> float:
    """Weight and Adam's two moments per worker; under dense also the V x d gradient and
    Adam's V x d temporary (its denominator)."""
    return world * vocab * dim * 4 * (5 if optimizer == "dense" else 3) / 2**30 + 0.5 * world


def markdown(rows: list[dict]) -> str:
    head = ("| V | workers | optimizer | step ms | CPU ms | bytes/step/worker | rows/worker | "
            "union rows | peak RSS GiB |\n|---|---|---|---|---|---|---|---|---|")
    lines = [f"| {r['vocab']:,} | {r['world']} | {r['optimizer']} | "
             + (f"{r['step_ms']} | {r['cpu_ms']} | {r['bytes_per_step']:,} | {r['rows']:,} | "
                f"{r['union']:,} | {r['peak_rss_gib']} |" if "step_ms" in r
                else f"skipped: {r['skipped']} |||||")
             for r in rows]
    return "\n".join([head, *lines])


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = parse(p, argv, SMOKE)
    if args.worker:
        print(json.dumps(_worker(json.loads(args.worker))))
        return 0
    if args.device != "cpu" and args.workers != [1]:
        p.error("--device cuda measures one worker: add --workers 1")
    rows = []
    for vocab in args.vocab:
        for world in args.workers:
            for optimizer in args.optimizers:
                spec = {"vocab": vocab, "dim": args.dim, "pairs": args.pairs, "zipf": args.zipf,
                        "world": world, "optimizer": optimizer, "steps": args.steps,
                        "warmup": args.warmup, "threads": args.threads, "seed": 0,
                        "device": args.device}
                row = {"vocab": vocab, "world": world, "optimizer": optimizer}
                need = _estimate_gib(vocab, args.dim, world, optimizer)
                limit = args.max_gib or 0.8 * _available_gib()  # now: the machine is shared
                if need > limit:
                    rows.append({**row, "skipped": f"needs ~{need:.1f} GiB > {limit:.1f}"})
                elif args.smoke and world == 1:  # in this process: no interpreter to start
                    rows.append({**row, **_worker({**spec, "rank": 0})})
                else:
                    rows.append({**row, **_processes(spec)})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
    print(f"\nd = {args.dim}, {args.pairs} pairs per step, Zipf {args.zipf}, {args.threads} "
          f"thread(s) per worker, {os.cpu_count()} CPUs, device {args.device}\n")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
