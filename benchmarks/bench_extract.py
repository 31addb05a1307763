"""Extraction throughput: the build's extraction stage vs a bare loop calling the teacher.

    python benchmarks/bench_extract.py --build out/quickstart --sentences 20000

Both process the same selected sentences of an existing build (``<build>/work/selection``), built
with the same ``--config``/``--set``:

* bare loop: one process, torch's default threads, the teacher's forward pass over
  length-sorted batches under the same token budget — no alignment, no Ray, nothing saved;
* pipeline: the build's extraction stage (Ray Data actor pool, alignment, per-word sums,
  per-part partials and markers, the step-1 model) in a scratch copy of the build whose selection
  holds just those sentences, actor start-up included.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq


def _scratch_build(build: str, table: pa.Table) -> str:
    """A copy of the build's finished stages up to selection, whose only part is ``table``."""
    scratch = tempfile.mkdtemp(prefix="swe-bx-")
    for stage in ("corpus", "sentences", "vocab"):
        shutil.copytree(os.path.join(build, "work", stage), os.path.join(scratch, "work", stage))
    sel = os.path.join(scratch, "work", "selection")
    os.makedirs(os.path.join(sel, "parts"))
    shutil.copy(os.path.join(build, "work", "selection", "_DONE.json"), sel)
    pq.write_table(table, os.path.join(sel, "parts", "en-bench.parquet"), row_group_size=4096)
    return scratch


def main() -> None:
    """Time both and print a JSON report."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", required=True, help="a local build output with a selection stage")
    p.add_argument("--sentences", type=int, default=20_000)
    p.add_argument("--config", default="pipelines/configs/quickstart.toml")
    p.add_argument("--set", action="append", default=[])
    args = p.parse_args()

    from swe.build import build, load_config
    from swe.build.stages.extraction import length_batches
    from swe.build.teacher import Teacher

    parts = sorted(glob.glob(os.path.join(args.build, "work/selection/parts/*.parquet")))
    table = pa.concat_tables([pq.read_table(f) for f in parts]).slice(0, args.sentences)
    n = table.num_rows
    tokens = int((table.column("ntok").to_numpy() + 2).sum())
    scratch = _scratch_build(args.build, table)
    cfg = load_config(args.config, args.set, output=scratch)
    budget = cfg.extraction.token_budget

    teacher = Teacher(cfg.teacher_dir())
    texts = table.column("text").to_pylist()
    t = time.perf_counter()
    for idx in length_batches(table.column("ntok").to_numpy(), budget):
        teacher.hidden_states([texts[i] for i in idx])
    bare = time.perf_counter() - t

    t = time.perf_counter()
    result = build(cfg, until="extraction")["extraction"]
    pipe = time.perf_counter() - t
    shutil.rmtree(scratch, ignore_errors=True)
    if result.sentences != n:
        raise SystemExit(f"the scratch build reused stages of another config: extracted "
                         f"{result.sentences} of {n} sentences; pass the build's --config/--set")
    report = {
        "sentences": n, "tokens": tokens, "token_budget": budget,
        "bare_loop": {"sentences_per_s": round(n / bare, 1), "tokens_per_s": round(tokens / bare)},
        "pipeline": {"sentences_per_s": round(n / pipe, 1), "tokens_per_s": round(tokens / pipe),
                     "actors": result.actors},
        "pipeline_over_bare": round(bare / pipe, 3), "cpu_count": os.cpu_count(),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
