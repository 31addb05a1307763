"""Extraction against a teacher-output store (:mod:`swe.build.teacher.store`): the tasks that
split the selected sentences by store bucket and serve what the store already holds.

1. One task per selection part writes its rows, keyed, into ``<stage>/req/b<k>/<part>.parquet``.
2. One task per bucket reads that bucket's requests and the keys the store holds in the same
   bucket, adds each stored sentence's word vectors to fixed-point per-word sums (the same files
   the teacher actors write), writes its pooled embeddings as targets when the build wants them,
   and writes the sentences the store lacks to ``<stage>/miss/b<k>.parquet``.
3. The teacher actors then encode only those (``swe.build.stages.extraction``).

The driver passes prefixes and receives counts; a bucket's requests and keys stay in its task.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from swe import storage
from swe.build.shuffle import by_partition, id_partition, write_groups
from swe.build.tasks import node_id
from swe.build.teacher.extractor import to_fixed
from swe.build.teacher.store import (
    BUCKETS,
    Namespace,
    bucket_of,
    read_bucket_keys,
    read_rows,
    sentence_key,
    unit_vectors,
)

__all__ = ["lookup_bucket", "split_requests"]


def split_requests(part_url: str, req_dir: str) -> dict:
    """Rows of one selection part, with their keys, into one file per store bucket."""
    t = storage.read_parquet(part_url, ["sid", "text", "lang", "word_ids"])
    keys = [sentence_key(lang, text) for lang, text in zip(
        t.column("lang").to_pylist(), t.column("text").to_pylist(), strict=True)]
    t = t.append_column("key", pa.array(keys, pa.binary(16)))
    buckets = np.fromiter((bucket_of(k) for k in keys), np.int64, len(keys))
    name = part_url.rsplit("/", 1)[-1]
    for k in range(BUCKETS):
        rows = np.flatnonzero(buckets == k)
        if len(rows):
            storage.write_parquet(storage.join(req_dir, f"b{k:x}", name), t.take(rows))
    return {"rows": t.num_rows, "node": node_id()}


def lookup_bucket(k: int, req_dir: str, ns: Namespace, vocab: dict[str, str],
                  lang_offset: dict[str, int], total: int, parts: int, sums_dir: str,
                  targets: str | None, miss_url: str) -> dict:
    """Serve bucket ``k``'s requests from the store; write the rest as misses."""
    from swe.build.outputs import vocab_words

    reqs = _requests(req_dir, k)
    if reqs is None:
        return {"hits": 0, "misses": 0, "bad_rows": 0, "bad_files": 0, "node": node_id()}
    index, bad_files = read_bucket_keys(ns, k)
    found = _stored(index, reqs.column("key").to_pylist())
    words = {lang: vocab_words(url) for lang, url in vocab.items()}
    sums: dict[int, np.ndarray] = {}
    counts: dict[int, int] = {}
    pooled, hit_rows = [], []
    for i, row in enumerate(found):
        if row is None:
            continue
        lang = reqs.column("lang")[i].as_py()
        vecs = unit_vectors(row, ns.dim)
        for wid in reqs.column("word_ids")[i].as_py():
            v = vecs.get(words[lang][wid])
            if v is not None:
                gid = wid + lang_offset[lang]
                f = to_fixed(v.astype(np.float64))
                sums[gid] = sums[gid] + f if gid in sums else f
                counts[gid] = counts.get(gid, 0) + 1
        hit_rows.append(i)
        pooled.append(np.frombuffer(row["sentence"], np.float32))
    if sums:
        gids = np.fromiter(sums, np.int64, len(sums))
        write_groups(by_partition(id_partition(gids, total, parts), word_id=gids,
                                  sum=np.stack(list(sums.values())),
                                  count=np.fromiter(counts.values(), np.int64, len(gids))),
                     lambda p: storage.join(sums_dir, f"p{p:04d}", f"b{k:x}.npz"))
    if targets and pooled:
        hits = reqs.take(hit_rows)
        flat = pa.array(np.stack(pooled).reshape(-1))
        storage.write_parquet(storage.join(targets, f"b{k:x}.parquet"), pa.table({
            "sid": hits.column("sid"), "src": hits.column("text"),
            "teacher": pa.FixedSizeListArray.from_arrays(flat, ns.dim)}))
    missing = [i for i, row in enumerate(found) if row is None]
    if missing:
        storage.write_parquet(miss_url, reqs.take(missing).drop_columns(["key"]))
    bad_rows = sum(1 for key, row in zip(reqs.column("key").to_pylist(), found, strict=True)
                   if row is None and key in index)
    return {"hits": len(hit_rows), "misses": len(missing), "bad_rows": bad_rows,
            "bad_files": len(bad_files), "bad_file_names": bad_files[:3], "node": node_id()}


def _requests(req_dir: str, k: int) -> pa.Table | None:
    """Bucket ``k``'s requests from every part, in part then sid order."""
    folder = storage.join(req_dir, f"b{k:x}")
    fs, path = storage.filesystem(folder)
    if not fs.exists(path):
        return None
    tables = [storage.read_parquet(u) for u in storage.find(folder) if u.endswith(".parquet")]
    t = pa.concat_tables(tables)
    return t.take(np.argsort(t.column("sid").to_numpy(), kind="stable"))


def _stored(index: dict[bytes, tuple[str, int]], keys: list[bytes]) -> list[dict | None]:
    """The checked stored row of each key, None where the store lacks it or its row is bad."""
    by_file: dict[str, list[tuple[int, int]]] = {}
    for i, key in enumerate(keys):
        if key in index:
            url, row = index[key]
            by_file.setdefault(url, []).append((i, row))
    out: list[dict | None] = [None] * len(keys)
    for url, wanted in sorted(by_file.items()):
        try:
            rows = read_rows(url, [r for _, r in wanted])
        except Exception:  # unreadable since the index was read: encode these again
            continue
        for (i, _), row in zip(wanted, rows, strict=True):
            out[i] = row
    return out
