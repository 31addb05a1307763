"""Peak memory of encoding one huge text (docs/reliability.md).

    python benchmarks/bench_huge_text.py --mb 200

Builds a 30,000-word model with random 256-d vectors and the MiniLM tokenizer (the OOV rule
on), makes one text of ``--mb`` megabytes from English Wikipedia sentences, encodes it, and
prints the text size, the RSS just before the encode and the process's peak RSS
(``ru_maxrss``) after it.
"""

from __future__ import annotations

import argparse
import lzma
import os
import resource
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

DATA = Path(os.environ.get("SWE_DATA", Path(__file__).resolve().parents[2] / "shared/data"),
            "corpora/en_wikipedia")


def _text(megabytes: int) -> str:
    """About ``megabytes`` MB (UTF-8) of Wikipedia sentences, one per line: the first lines of
    the corpus, repeated (built without a second copy, so the set-up peak stays low)."""
    with lzma.open(DATA / "enwiki_sents.00.txt.xz", "rt", encoding="utf-8") as f:
        block = f.read(16 << 20)
    block = block[: block.rindex("\n") + 1]
    return block * max(1, round((megabytes << 20) / len(block.encode("utf-8"))))


def _rss_mib() -> float:
    """The current resident set size in MiB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def main() -> None:
    """Encode one huge text and print the peak RSS."""
    from swe import StaticModel
    from swe.build.teacher import minilm_dir

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mb", type=int, default=200)
    args = p.parse_args()
    text = _text(args.mb)
    vocab = [w for w, _ in Counter(text[: 8 << 20].lower().split()).most_common(30_000)]
    rng = np.random.default_rng(0)
    model = StaticModel.from_vectors(vocab, rng.standard_normal((len(vocab), 256)),
                                     tokenizer=minilm_dir())
    before = _rss_mib()
    start = time.perf_counter()
    vec = model.encode(text)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    utf8, held = len(text.encode("utf-8")) / 2**20, sys.getsizeof(text) / 2**20
    print(f"text {utf8:.0f} MiB UTF-8 ({held:.0f} MiB as a str); RSS before encode "
          f"{before:.0f} MiB, peak {peak:.0f} MiB "
          f"(+{peak - before:.0f} MiB); {seconds:.1f} s; norm {np.linalg.norm(vec):.3f}")

if __name__ == "__main__":
    main()
