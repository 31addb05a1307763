"""What checking a model's checksums costs at load (docs/reliability.md).

    python benchmarks/bench_load_checksums.py
    python benchmarks/bench_load_checksums.py --smoke   # 2,000 x 64, best of 2

Needs only the library (no extra). Saves a ``--words`` x ``--dim`` float32 model (150,000 x 256
by default), loads it ``--repeats`` times with its checksums checked (format version 2), then as
many times as a version-1 folder (no checksums), and prints the best of each.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

SMOKE = {"words": 2000, "dim": 64, "repeats": 2}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--words", type=int, default=150_000)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}")
    return p


def _best_load(path: str, repeats: int) -> float:
    """The fastest of ``repeats`` loads of ``path``, in seconds."""
    from swe import StaticModel

    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        StaticModel.load(path)
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    """Print the load time with and without checksums."""
    import numpy as np

    from swe import StaticModel

    p = parser()
    if p.parse_args(argv).smoke:
        p.set_defaults(**SMOKE)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as path:
        words = [f"w{i}" for i in range(args.words)]
        vectors = np.random.default_rng(0).standard_normal((len(words), args.dim))
        StaticModel.from_vectors(words, vectors).save(path)
        checked = _best_load(path, args.repeats)
        config_path = os.path.join(path, "config.json")
        with open(config_path) as f:
            config = json.load(f)
        config.pop("files")
        config["format_version"] = 1
        with open(config_path, "w") as f:
            json.dump(config, f)
        unchecked = _best_load(path, args.repeats)
        mib = os.path.getsize(os.path.join(path, "model.safetensors")) / 2**20
    print(f"{args.words:,} x {args.dim} float32 ({mib:.1f} MiB): load {checked:.3f} s with "
          f"checksums, {unchecked:.3f} s without (best of {args.repeats})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
