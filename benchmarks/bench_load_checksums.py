"""What checking a model's checksums costs at load (docs/reliability.md).

    python benchmarks/bench_load_checksums.py
    python benchmarks/bench_load_checksums.py --smoke   # 2,000 x 64, best of 2

Needs only the library (no extra). Saves a ``--words`` x ``--dim`` float32 model (150,000 x 256
by default), loads it ``--repeats`` times (every file and config.json checked against their
SHA-256), times the SHA-256 of the folder's files alone as many times, and prints the best of
each: the checksums' share of a load.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

from _smoke import parse

SMOKE = {"words": 2000, "dim": 64, "repeats": 2}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--words", type=int, default=150_000)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}")
    return p


def _best(fn, repeats: int) -> float:
    """The fastest of ``repeats`` calls of ``fn``, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _hash_files(path: str) -> None:
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            hashlib.sha256(f.read()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    """Print the load time and the checksums' part of it."""
    import numpy as np

    from swe import StaticModel

    p = parser()
    args = parse(p, argv, SMOKE)
    with tempfile.TemporaryDirectory() as path:
        words = [f"w{i}" for i in range(args.words)]
        vectors = np.random.default_rng(0).standard_normal((len(words), args.dim))
        StaticModel.from_vectors(words, vectors).save(path)
        load = _best(lambda: StaticModel.load(path), args.repeats)
        hashing = _best(lambda: _hash_files(path), args.repeats)
        mib = os.path.getsize(os.path.join(path, "model.safetensors")) / 2**20
    print(f"{args.words:,} x {args.dim} float32 ({mib:.1f} MiB): load {load:.3f} s, of which "
          f"about {hashing:.3f} s is SHA-256 of its files (best of {args.repeats})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
