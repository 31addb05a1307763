"""Bitext mining at scale: Tatoeba XXX–eng gold pairs among 100k+ distractors per side per split
(any length, whole corpus files), every similarity through the blocked top-k; prints F1, time and
peak memory as JSON.

    python pipelines/bench_mining.py --model out/multilingual/step3 --lang cmn --distractors 220000
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", required=True, help="an encoder spec (see pipelines/evaluate.py)")
    p.add_argument("--lang", default="cmn", help="deu, cmn or jpn")
    p.add_argument("--distractors", type=int, default=220_000, help="per side, both splits")
    p.add_argument("--data", type=Path, default=DATA)
    args = p.parse_args()

    from swe.evaluate import load_encoder, read_tatoeba
    from swe.mining import DISTRACTOR_CORPORA, bucc, read_distractors

    encoder = load_encoder(args.model)
    xs, en = read_tatoeba(args.lang, args.data / "eval/tatoeba_v1")
    t = time.perf_counter()
    dx = read_distractors(args.data / DISTRACTOR_CORPORA[args.lang], args.distractors, set(xs),
                          (1, 10**6), scan=None)
    dy = read_distractors(args.data / DISTRACTOR_CORPORA["eng"], args.distractors, set(en),
                          (1, 10**6), scan=None)
    result = bucc(encoder, list(zip(xs, en, strict=True)), dx, dy)
    result["seconds"] = time.perf_counter() - t
    with open("/proc/self/status") as f:  # Linux: peak resident memory of this process
        result["peak_rss_mib"] = next(int(x.split()[1]) / 1024 for x in f
                                      if x.startswith("VmHWM"))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
