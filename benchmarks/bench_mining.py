"""Bitext mining at scale: Tatoeba XXX–eng gold pairs among 100k+ distractors per side per split
(any length, whole corpus files), every similarity through the blocked top-k; prints F1, time and
peak memory as JSON.

    python benchmarks/bench_mining.py --model out/multilingual/step3 --lang cmn --distractors 220000
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from swe.eval.data import data_root
from swe.eval.encoders import load_encoder
from swe.eval.mining import bucc_tatoeba
from swe.eval.speed import peak_rss_bytes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", required=True, help="an encoder spec (see swe.eval.encoders)")
    p.add_argument("--lang", default="cmn", help="deu, cmn or jpn")
    p.add_argument("--distractors", type=int, default=220_000, help="per side, both splits")
    p.add_argument("--data", type=Path, default=data_root(), help="the shared data dir")
    args = p.parse_args()

    encoder = load_encoder(args.model)
    t = time.perf_counter()
    result = bucc_tatoeba(encoder, args.lang, args.data, args.distractors, scan=None,
                          length_window=False)
    result["seconds"] = time.perf_counter() - t
    result["peak_rss_mib"] = peak_rss_bytes() / 2**20
    print(json.dumps(result))


if __name__ == "__main__":
    main()
