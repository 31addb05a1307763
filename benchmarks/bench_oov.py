"""Encode speed of one model under both OOV rules (issue 16: "speed unchanged").

    python benchmarks/bench_oov.py --model out/quickstart/model --sentences 100000

Both rules run in this one process on the same English Wikipedia sentences, one thread,
interleaved (so background load hits both alike): a cold run (empty memo: every new surface form
pays its lookup and OOV rule once) and warm runs; medians of ``--repeats``.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

from swe import StaticModel
from swe.eval.data import data_root


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", required=True)
    p.add_argument("--sentences", type=int, default=100_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json")
    a = p.parse_args()
    path = data_root() / "corpora/en_wikipedia/enwiki_sents.00.txt.xz"
    with lzma.open(path, "rt", encoding="utf-8") as f:
        texts = [next(f).rstrip("\n") for _ in range(a.sentences)]
    times: dict[str, dict[str, list[float]]] = {r: {"cold": [], "warm": []}
                                                for r in ("subword", "prefix")}
    for _ in range(a.repeats):
        for rule in times:
            model = StaticModel.load(a.model)
            model.oov = rule
            for kind in ("cold", "warm"):
                t0 = time.perf_counter()
                model.encode(texts)
                times[rule][kind].append(a.sentences / (time.perf_counter() - t0))
    out = {rule: {k: round(statistics.median(v)) for k, v in t.items()}
           for rule, t in times.items()}
    print(json.dumps({"model": a.model, "sentences": a.sentences, "sentences_per_s": out}))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
