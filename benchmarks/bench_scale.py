"""Cost growth: wall time and peak memory of each build stage at several corpus sizes.

    python benchmarks/bench_scale.py --sizes 100000 400000 1600000 --set vocab.size=5000

Each size is a fresh build of the first N English Wikipedia sentences (same V, N, C, d′), run
one stage at a time (``until``) so each stage is timed alone. Peak memory is the machine-wide
peak of (MemTotal − MemAvailable) while the stage runs, minus the level before it started: it
covers the driver, every Ray worker and the object store.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import threading
import time


def _used_mib() -> float:
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":")
            info[k] = int(v.split()[0])
    return (info["MemTotal"] - info["MemAvailable"]) / 1024


class PeakMemory:
    """Samples machine-wide used memory every 0.2 s while active."""

    def __enter__(self):
        self.base = self.peak = _used_mib()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, _used_mib())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def delta(self) -> float:
        return self.peak - self.base


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 400_000, 1_600_000])
    p.add_argument("--config", default="pipelines/configs/en.toml")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--json", help="write the results here")
    p.add_argument("--data", help="the shared data dir (default: swe.eval.data.data_root())")
    args = p.parse_args()

    from swe.build import build, load_config
    from swe.build.stages import STAGE_NAMES
    from swe.eval.data import wikipedia_files
    from swe.raysetup import init_ray

    init_ray()
    results = {}
    for size in args.sizes:
        out = tempfile.mkdtemp(prefix=f"swe-scale-{size}-")
        # Only the files needed (825,535 sentences each), so the corpus stage reads ~size lines.
        files = [str(f) for f in wikipedia_files(args.data)[:math.ceil(size / 825_535)]]
        cfg = load_config(args.config, [*args.set, f"corpus.en.max_lines={size}",
                                        f"corpus.en.paths={files!r}"], output=out)
        row = {}
        for stage in STAGE_NAMES:
            with PeakMemory() as mem:
                t = time.perf_counter()
                report = build(cfg, until=stage)
                secs = time.perf_counter() - t
            row[stage] = {"seconds": round(secs, 1), "peak_mib": round(mem.delta)}
            if stage == "sentences":
                row[stage]["sentences"] = report["sentences"].sentences
            if stage == "selection":
                row[stage]["unique_sentences"] = report["selection"].unique_sentences
            print(size, stage, row[stage], flush=True)
        results[size] = row
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
