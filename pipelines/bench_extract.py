"""Extraction throughput: the build's extraction stage vs a bare loop calling the teacher.

    python pipelines/bench_extract.py --build out/quickstart --sentences 20000

Both process the same selected sentences of an existing build (``<build>/work/selection``):

* bare loop: one process, torch's default threads, the teacher's forward pass over
  length-sorted batches under the same token budget — no alignment, no Ray, nothing saved;
* pipeline: ``swe.build``'s extraction stage (Ray Data actor pool, alignment, per-word sums,
  per-part partials and markers) in a scratch output, actor start-up included.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", required=True, help="a local build output with a selection stage")
    p.add_argument("--sentences", type=int, default=20_000)
    p.add_argument("--config", default="pipelines/configs/quickstart.toml")
    p.add_argument("--set", action="append", default=[])
    args = p.parse_args()

    from swe.artifacts import Stage
    from swe.build import _extract
    from swe.config import load_config
    from swe.raysetup import init_ray
    from swe.stages import extraction as ex_mod
    from swe.stages.extraction import length_batches
    from swe.teacher import Teacher

    parts = sorted(glob.glob(os.path.join(args.build, "work/selection/parts/*.parquet")))
    table = pa.concat_tables([pq.read_table(f) for f in parts]).slice(0, args.sentences)
    n = table.num_rows
    tokens = int((table.column("ntok").to_numpy() + 2).sum())
    cfg = load_config(args.config, args.set, output=tempfile.mkdtemp(prefix="swe-bx-"))
    budget = cfg.extraction.token_budget

    teacher = Teacher(cfg.teacher_dir())
    texts = table.column("text").to_pylist()
    t = time.perf_counter()
    for idx in length_batches(table.column("ntok").to_numpy(), budget):
        teacher.hidden_states([texts[i] for i in idx])
    bare = time.perf_counter() - t

    # The same sentences as one selection part of a scratch build.
    scratch = cfg.output
    sel = Stage(scratch, "selection", "bench")
    os.makedirs(sel.path("parts"), exist_ok=True)
    pq.write_table(table, sel.path("parts", "en-bench.parquet"), row_group_size=4096)
    vocab = {"en": pq.read_table(os.path.join(args.build, "work/vocab/en.parquet"))
             .column("word").to_pylist()}
    init_ray()
    st = Stage(scratch, "extraction", "bench")
    t = time.perf_counter()
    _extract(st, cfg, cfg.teacher_dir(), vocab, np.array([0, len(vocab["en"])]), sel, ex_mod)
    pipe = time.perf_counter() - t
    shutil.rmtree(scratch, ignore_errors=True)
    report = {
        "sentences": n, "tokens": tokens, "token_budget": budget,
        "bare_loop": {"sentences_per_s": round(n / bare, 1), "tokens_per_s": round(tokens / bare)},
        "pipeline": {"sentences_per_s": round(n / pipe, 1), "tokens_per_s": round(tokens / pipe),
                     "actors": st.stats.get("actors")},
        "pipeline_over_bare": round(bare / pipe, 3), "cpu_count": os.cpu_count(),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
