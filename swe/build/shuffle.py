"""Key-partitioned exchange between the tasks of a stage, through files under its work dir.

A producer task (one per shard) splits its rows by key into ``P`` partitions and writes one file
per non-empty partition (``<prefix>/p<P>/s<K>.npz`` when a partition task reads them, or
``<prefix>/s<K>/p<P>.npz`` when a shard task does); a consumer task reads and concatenates its
files in name order, so its input never depends on which producer finished first. The driver
passes only prefixes and counts: nothing that grows with the corpus goes through it.

Word ids are range-partitioned (``p = id · P // V``), so a partition holds a contiguous block of
word ids and partitions concatenated in order are in word order.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from swe import storage

__all__ = ["by_partition", "id_partition", "partition_ids", "read_files", "shuffle_key",
           "write_groups"]


def id_partition(ids: np.ndarray, total: int, parts: int) -> np.ndarray:
    """The range partition of each id in ``[0, total)``."""
    return (np.asarray(ids, np.int64) * parts) // max(total, 1)


def partition_ids(p: int, total: int, parts: int) -> np.ndarray:
    """The ids in ``[0, total)`` that fall in range partition ``p``."""
    ids = np.arange(total, dtype=np.int64)
    return ids[id_partition(ids, total, parts) == p]


def by_partition(part: np.ndarray, **columns: np.ndarray) -> dict[int, dict[str, np.ndarray]]:
    """Rows grouped by partition number (order within a partition kept)."""
    order = np.argsort(part, kind="stable")
    sorted_part = part[order]
    keys, starts = np.unique(sorted_part, return_index=True)
    ends = [*starts[1:], len(order)] if len(starts) else []
    return {int(k): {name: col[order[a:b]] for name, col in columns.items()}
            for k, a, b in zip(keys, starts, ends, strict=True)}


def write_groups(groups: dict[int, dict[str, np.ndarray]], url_of: Callable[[int], str]) -> int:
    """Write each group ``k`` to ``url_of(k)`` as ``.npz``; the number of files written."""
    for k, cols in groups.items():
        storage.save_npz(url_of(k), **cols)
    return len(groups)


def read_files(directory: str, columns: dict[str, np.dtype]) -> dict[str, np.ndarray]:
    """Every ``.npz`` under ``directory`` (name order) concatenated; empty arrays if none."""
    parts: dict[str, list[np.ndarray]] = {c: [] for c in columns}
    for url in storage.find(directory):
        if url.endswith(".npz"):
            z = storage.load_npz(url)
            for c in columns:
                parts[c].append(z[c])
    return {c: np.concatenate(v).astype(dtype) if v else np.zeros(0, dtype)
            for (c, v), dtype in zip(parts.items(), columns.values(), strict=True)}


_M64 = (1 << 64) - 1


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, element-wise on uint64 (wrapping)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def shuffle_key(hashes: np.ndarray, seed: int) -> np.ndarray:
    """A seed-keyed int64 mix of integer keys (pair hashes, sentence ids): sorting rows by it
    is a uniformly random order that depends only on the keys and the seed — not on the
    files' order, the chunking, the cluster or the order rows arrived in."""
    h = np.asarray(hashes)
    h = h.view(np.uint64) if h.dtype.itemsize == 8 and h.dtype.kind in "iu" else \
        h.astype(np.uint64)
    salt = _splitmix64(np.array([seed & _M64], np.uint64))
    return _splitmix64(h ^ salt).view(np.int64)
