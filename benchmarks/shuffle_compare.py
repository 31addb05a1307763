"""Word counting two ways over the same sentence shards: the vocab stage's partitioned files
(one task per shard writes hash partitions, one task per partition merges) against Ray Data's
hash-shuffle ``groupby("word").count()``.

    python benchmarks/shuffle_compare.py --build out/scale-4 --partitions 16

``--build`` is a build output whose sentences stage is done (e.g. one of benchmarks/scale.py's).
Prints wall seconds, the driver's peak RSS and the number of distinct words for each; both must
find the same counts.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import tempfile
import time


def _peak() -> int:
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmHWM:"))


def _reset() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def main() -> None:
    """Run both and print a JSON report."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", required=True)
    p.add_argument("--partitions", type=int, default=16)
    args = p.parse_args()

    import ray

    from swe.build.stages.vocab import count_shard, merge_partition
    from swe.build.stages.vocab import text_keys as keys_of
    from swe.raysetup import get, init_ray

    init_ray()
    shards = sorted(glob.glob(os.path.join(args.build, "work/sentences/en/*.parquet")))
    out = tempfile.mkdtemp(prefix="swe-shuffle-")
    _reset()
    t = time.perf_counter()
    count = ray.remote(num_cpus=0.5)(count_shard)
    merge = ray.remote(num_cpus=0.5)(merge_partition)
    get([count.remote(s, "en", None, args.partitions, out, k) for k, s in enumerate(shards)])
    files = get([merge.remote(out, k, 10**9, 1) for k in range(args.partitions)])
    report = {"sentences_shards": len(shards), "files": {
        "seconds": round(time.perf_counter() - t, 1), "driver_peak_rss_bytes": _peak(),
        "distinct_words": sum(f["kept"] for f in files)}}

    _reset()
    t = time.perf_counter()
    ctx = ray.data.DataContext.get_current()
    ctx.default_hash_shuffle_parallelism = args.partitions
    ds = ray.data.read_parquet(shards, columns=["text"]).flat_map(
        lambda row: [{"word": w} for w in next(keys_of([row["text"]], "en", None))])
    counted = ds.groupby("word").count().materialize()
    report["ray_data_groupby"] = {
        "seconds": round(time.perf_counter() - t, 1), "driver_peak_rss_bytes": _peak(),
        "distinct_words": counted.count()}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
