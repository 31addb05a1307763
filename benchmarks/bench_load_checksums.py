"""What checking a model's checksums costs at load (docs/reliability.md).

    python benchmarks/bench_load_checksums.py

Saves a 150,000 x 256 float32 model, loads it five times with its checksums checked (format
version 2), then five times as a version-1 folder (no checksums), and prints the best of each.
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import numpy as np

from swe import StaticModel


def _best_load(path: str, repeats: int = 5) -> float:
    """The fastest of ``repeats`` loads of ``path``, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        StaticModel.load(path)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    """Print the load time with and without checksums."""
    with tempfile.TemporaryDirectory() as path:
        words = [f"w{i}" for i in range(150_000)]
        vectors = np.random.default_rng(0).standard_normal((len(words), 256))
        StaticModel.from_vectors(words, vectors).save(path)
        checked = _best_load(path)
        config_path = os.path.join(path, "config.json")
        with open(config_path) as f:
            config = json.load(f)
        config.pop("files")
        config["format_version"] = 1
        with open(config_path, "w") as f:
            json.dump(config, f)
        unchecked = _best_load(path)
        mib = os.path.getsize(os.path.join(path, "model.safetensors")) / 2**20
    print(f"150,000 x 256 float32 ({mib:.0f} MiB): load {checked:.3f} s with checksums, "
          f"{unchecked:.3f} s without (best of 5)")


if __name__ == "__main__":
    main()
