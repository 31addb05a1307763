"""Translation pairs as Ray Datasets for stage ``train_data``: every planned source read and
filtered in its own task (``swe.build.pairs.readers``), deduplicated across files by pair hash
(the best-scored copy wins), capped at each pair's ``max_pairs`` best rows, shuffled by the
seed-keyed key and split into train and validation. The driver holds only the plan and counts.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from swe import inputs, storage
from swe.build.pairs import readers as pair_readers
from swe.build.pairs import sources as pairs
from swe.build.pairs import text as pairtext
from swe.build.pairs.sources import PairsConfig
from swe.build.pairs.splits import split_last, where
from swe.build.shuffle import shuffle_key
from swe.raysetup import user_error

if TYPE_CHECKING:
    from swe.build.config import BuildConfig

__all__ = ["best_of_each_pair", "pair_counts", "pair_splits", "read_pair_source", "read_pairs",
           "rows_per_pair", "split_by_document"]

log = logging.getLogger("swe.build")


def pair_splits(cfg: BuildConfig, stats_dir: str) -> tuple[Any, Any, dict]:
    """Read, filter, deduplicate, cap and shuffle every pair source; ``(train, dev, stats)``."""
    import ray

    sources = [s for key, p in cfg.pairs.items() for s in pairs.plan_sources(key, p)]
    ds = read_pairs(sources, cfg.pairs, stats_dir, cfg.seed)
    if any(p.dedup for p in cfg.pairs.values()):
        parts = max(4, 2 * int(ray.cluster_resources().get("CPU", 1)))
        ds = ds.repartition(parts, keys=["h"], sort=True).map_batches(
            best_of_each_pair, batch_size=None, batch_format="pyarrow",
            fn_kwargs={"dedup": [k for k, p in cfg.pairs.items() if p.dedup]})
    ds = ds.materialize()
    deduplicated = ds.count()
    ds = _cap_pairs(ds, cfg.pairs)
    if any(p.dev_documents or p.dev_share for p in cfg.pairs.values()):
        train, dev, n = split_by_document(ds, cfg.refine.dev_max)
        kept = pair_counts(where(ds, "dev", [False]), dev)  # train's rows, counted unsorted
    else:
        train, dev, n = split_last(ds, cfg.refine.dev_max)  # both materialised by the split
        kept = pair_counts(train, dev)
    read = _read_stats(stats_dir, len(sources), sources)
    if not n:
        raise ValueError("no translation pair kept from the [pairs] sources: "
                         f"{_describe(read)}")
    read_total = sum(s.get("kept", 0) for s in read.values())
    stats = {"pairs": {k: kept.get(k, 0) for k in cfg.pairs}, "read": read,
             "duplicates": read_total - deduplicated, "over_max_pairs": deduplicated - n}
    log.info("[train_data] pairs: %s; %d duplicates and %d over max_pairs dropped",
             _describe(read), stats["duplicates"], stats["over_max_pairs"])
    return (train.drop_columns(["h", "rank", "dev"]), dev.drop_columns(["h", "rank", "dev"]),
            stats)


def pair_counts(*parts: Any) -> dict[str, int]:
    """Rows per language pair over ``parts``, counted block by block in tasks (no shuffle, and
    no second run of a lazily sorted split before it is written)."""
    kept: Counter = Counter()
    for part in parts:
        for row in part.map_batches(rows_per_pair, batch_size=None,
                                    batch_format="pyarrow").take_all():
            kept[row["pair"]] += row["rows"]
    return dict(kept)


def rows_per_pair(batch: pa.Table) -> pa.Table:
    """Ray Data UDF: ``batch``'s rows per language pair."""
    counts = pc.value_counts(batch.column("pair"))
    return pa.table({"pair": counts.field("values"), "rows": counts.field("counts")})


def split_by_document(ds: Any, dev_max: int) -> tuple[Any, Any, int]:
    """Validation: the held-out pairs (``dev``: documents or sentences), at most ``dev_max`` by
    shuffle key; train: every other pair, in shuffle-key order. ``(train, dev, rows)``."""
    ds = ds.materialize()
    train = where(ds, "dev", [False]).sort("k")
    dev = where(ds, "dev", [True]).sort("k").limit(dev_max)
    return train, dev, ds.count()


def read_pairs(sources: list, configs: Mapping[str, PairsConfig], stats_dir: str,
               seed: int) -> Any:
    """Every source read and filtered by Ray Data tasks (one per source), with ``h``, ``k`` and
    ``rank`` columns; materialised in the object store. A bad file stops here: its error (the
    file named with what is wrong with it) is raised as itself, without Ray's traceback."""
    import ray

    items = [{"i": i, "source": json.dumps(asdict(s))} for i, s in enumerate(sources)]
    ds = ray.data.from_items(items, override_num_blocks=max(1, len(items))).map_batches(
        read_pair_source, batch_size=1, batch_format="pyarrow", num_cpus=0.5,
        fn_kwargs={"configs": {k: asdict(p) for k, p in configs.items()},
                   "stats_dir": stats_dir, "seed": seed})
    try:
        return ds.materialize()
    except Exception as e:
        raise user_error(e) from None


def _cap_pairs(ds: Any, cfg_pairs: Mapping[str, PairsConfig]) -> Any:
    """Each pair's ``max_pairs`` best-scored rows (ties, and unscored rows, by shuffle key)."""
    capped = {k: p.max_pairs for k, p in cfg_pairs.items() if p.max_pairs}
    if not capped:
        return ds
    parts = [where(ds, "pair", list(capped), keep=False)] if len(capped) < len(cfg_pairs) \
        else []
    for key, m in capped.items():
        one = where(ds, "pair", [key])
        parts.append(one.sort(["rank", "k"], descending=[True, False]).limit(m).materialize())
    return parts[0].union(*parts[1:]) if len(parts) > 1 else parts[0]


def read_pair_source(batch: pa.Table, configs: dict, stats_dir: str,
                     seed: int) -> Iterator[pa.Table]:
    """Ray Data read task: stream one pair source's kept rows with their keys — ``h`` (the
    pair's hash, for deduplication), ``k`` (the seed-keyed shuffle key) and ``rank`` (score,
    ``-inf`` when unscored) — and write its per-reason counts to ``stats_dir``."""

    row = batch.to_pylist()[0]
    source = pairs.PairSource(**json.loads(row["source"]))
    cfg = PairsConfig(**configs[source.key])
    stats: Counter = Counter()
    salt = np.uint64(int.from_bytes(source.key.encode()[:8].ljust(8, b"\0"), "little"))
    by_documents = bool(cfg.dev_documents) and \
        source.paths[0] == inputs.expand_inputs(cfg.paths[:1])[0]
    held = pa.array(sorted(pair_readers.dev_sources(source, cfg, seed)), pa.string()) \
        if by_documents else None
    for table in pair_readers.read_source(source, cfg, stats):
        h = pairtext.pair_hash(table.column("src"), table.column("tgt")) ^ salt
        score = table.column("score").to_numpy(zero_copy_only=False)
        if held is not None:
            dev = pc.is_in(table.column("src"), value_set=held)
        elif cfg.dev_share:
            dev = pa.array(pairtext.sentence_share(table.column("src"), seed) < cfg.dev_share)
        else:
            dev = pa.array(np.zeros(table.num_rows, bool))
        yield table.append_column("h", pa.array(h.view(np.int64))).append_column(
            "k", pa.array(shuffle_key(h, seed))).append_column(
            "rank", pa.array(np.where(np.isnan(score), -np.inf, score))).append_column(
            "dev", dev)
    storage.write_bytes_atomic(storage.join(stats_dir, f"{row['i']:06d}.json"),
                               json.dumps(dict(stats)).encode())


def best_of_each_pair(block: pa.Table, dedup: list[str]) -> pa.Table:
    """One row per duplicate pair (same ``h``; the block is sorted by ``h`` and holds every
    row of its hashes): the best-scored, ties by shuffle key; pairs not in ``dedup`` all stay."""
    if block.num_rows == 0:
        return block
    order = pc.sort_indices(block, [("h", "ascending"), ("rank", "descending"),
                                    ("k", "ascending")])
    block = block.take(order)
    h = block.column("h").to_numpy()
    first = np.ones(len(h), bool)
    first[1:] = h[1:] != h[:-1]
    keep = first | ~np.isin(block.column("pair").to_numpy(zero_copy_only=False), dedup)
    return block.filter(pa.array(keep))


def _read_stats(stats_dir: str, n: int, sources: list) -> dict[str, dict[str, int]]:
    """Per language pair: rows read, kept, and dropped by reason (summed over its sources)."""
    out: dict[str, Counter] = {}
    for i, source in enumerate(sources[:n]):
        counts = json.loads(storage.read_text(storage.join(stats_dir, f"{i:06d}.json")))
        out.setdefault(source.key, Counter()).update(counts)
    return {k: dict(v) for k, v in out.items()}


def _describe(read: Mapping[str, Mapping[str, int]]) -> str:
    return "; ".join(f"{k}: read {c.get('read', 0):,}, kept {c.get('kept', 0):,}" + "".join(
        f", {n:,} {why.replace('_', ' ')}" for why, n in sorted(c.items())
        if why not in ("read", "kept") and n) for k, c in read.items())
