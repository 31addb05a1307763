"""Vocabulary quantisation (``swe quantize``): a model's rows clustered into K shared unit
vectors by spherical k-means in Ray tasks; each word keeps its cluster index and its norm.

The driver plans and holds only the K × d centroids: every task reads its block of rows straight
from the source's ``model.safetensors`` (a byte range, local or ``s3://``), assigns them, and
returns per-cluster sums; the last pass writes each block's indices and norms, and one task
writes the new folder (format: :mod:`swe.matrix`). A seed fixes the result: the initial
centroids are seeded rows, blocks are summed in order in float64, and ties go to the lowest
cluster.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import struct
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from swe import storage
from swe.artifacts import refuse_inside
from swe.leftovers import foreign_files
from swe.matrix import DTYPES, SCALES, TENSOR
from swe.modelfiles import ModelFileError, ModelFolder
from swe.new_folder import holds_others_files, lease_new_folder

__all__ = ["ClusterReport", "quantize_model"]

log = logging.getLogger("swe.quantize")
_KINDS = {"F32": np.float32, "F16": np.float16, "I8": np.int8}
_BLOCK_ROWS = 65_536  # rows per task
_SCORES = 1 << 24  # similarity entries a task holds at once (64 MiB of float32)


@dataclass(frozen=True)
class ClusterReport:
    """What ``swe quantize`` did."""

    output: str
    words: int
    dim: int
    clusters: int
    dtype: str
    iterations: int
    mean_cosine: float  # mean cosine of a row to its centroid, after the last pass
    empty_clusters: int
    source_bytes: int
    output_bytes: int
    seconds: float


@dataclass(frozen=True)
class _Source:
    """Where a source model's rows lie in its ``model.safetensors``."""

    url: str  # the safetensors file
    kind: str  # F32, F16 or I8
    words: int
    dim: int
    data_start: int  # byte offset of row 0
    scales_start: int | None  # int8: byte offset of the float32 scales
    global_scale: bool


def _source(model: str) -> _Source:
    """The source's layout from its checked ``config.json`` and the safetensors header."""
    folder = ModelFolder(model)
    folder.check_sizes()  # a cut file: one line before Ray starts (the checksum: in a task)
    if folder.get("clusters", int, None) is not None:
        raise ValueError(f"{model} is already clustered; quantize the model it was made from")
    url = storage.join(model, "model.safetensors")
    fs, path = storage.filesystem(url)
    with fs.open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if not 2 <= n <= 1 << 24:
            raise ModelFileError(f"{url} is not a safetensors file; save the model again")
        header = json.loads(f.read(n))
    t = header.get(TENSOR)
    if not t or t.get("dtype") not in _KINDS or len(t.get("shape", [])) != 2:
        raise ModelFileError(f"{url}: no [V, d] {TENSOR!r} matrix of F32, F16 or I8")
    words, dim = t["shape"]
    scales = header.get("scales")
    return _Source(url, t["dtype"], words, dim, 8 + n + t["data_offsets"][0],
                   8 + n + scales["data_offsets"][0] if scales else None,
                   bool(scales) and scales["shape"] == [1])


def _rows(src: _Source, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of the source as float32, read as one byte range."""
    kind = np.dtype(_KINDS[src.kind])
    fs, path = storage.filesystem(src.url)
    with fs.open(path, "rb") as f:
        f.seek(src.data_start + start * src.dim * kind.itemsize)
        raw = f.read((stop - start) * src.dim * kind.itemsize)
        rows = np.frombuffer(raw, kind).reshape(stop - start, src.dim).astype(np.float32)
        if src.scales_start is not None:
            first, count = (0, 1) if src.global_scale else (start, stop - start)
            f.seek(src.scales_start + first * 4)
            rows *= np.frombuffer(f.read(count * 4), np.float32).reshape(-1, 1)
    return rows


def _unit(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    norms = np.linalg.norm(rows, axis=1)
    return rows / np.where(norms > 0, norms, 1)[:, None], norms


def _assign(units: np.ndarray, centroids: np.ndarray, start: int, exact: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """Each unit row's nearest centroid (highest cosine, lowest index on ties) and that cosine,
    in slices so a task never holds more than ``_SCORES`` similarities; rows ``start + i`` below
    ``exact`` keep their own centroid (``i``-th)."""
    step = max(1, _SCORES // len(centroids))
    best = np.empty(len(units), np.int64)
    cos = np.empty(len(units), np.float32)
    for a in range(0, len(units), step):
        sims = units[a:a + step] @ centroids.T
        best[a:a + step] = sims.argmax(axis=1)
        cos[a:a + step] = sims[np.arange(len(sims)), best[a:a + step]]
    own = np.arange(start, min(exact, start + len(units)))
    if len(own):
        best[own - start] = own
        cos[own - start] = (units[own - start] * centroids[own]).sum(axis=1)
    return best, cos


def _verify_task(model: str) -> int:
    """Read the source's matrix file once, in a task, against its recorded checksum."""
    folder = ModelFolder(model)
    entry = (folder.files or {}).get("model.safetensors") or {}
    fs, path = storage.filesystem(storage.join(model, "model.safetensors"))
    digest, size = hashlib.sha256(), 0
    with fs.open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
            size += len(chunk)
    if entry.get("sha256") != digest.hexdigest() or entry.get("bytes") != size:
        raise ModelFileError(f"{model}/model.safetensors does not match the checksum in its "
                             "config.json; save the model again")
    return size


def _seed_task(src: _Source, start: int, stop: int, picks: np.ndarray) -> np.ndarray:
    """The unit rows of the block's picked rows (the initial centroids)."""
    return _unit(_rows(src, start, stop)[picks - start])[0]


def _sums_task(src: _Source, start: int, stop: int, centroids: np.ndarray, exact: int) -> tuple:
    """One block's per-cluster sums of unit rows (float64), counts and summed cosine."""
    units, _ = _unit(_rows(src, start, stop))
    best, cos = _assign(units, centroids, start, exact)
    order = np.argsort(best, kind="stable")
    keys, first = np.unique(best[order], return_index=True)
    sums = np.zeros(centroids.shape, np.float64)
    sums[keys] = np.add.reduceat(units[order].astype(np.float64), first, axis=0)
    return sums, np.bincount(best, minlength=len(centroids)), float(cos.sum(dtype=np.float64))


def _final_task(src: _Source, start: int, stop: int, centroids: np.ndarray, work: str,
                exact: int) -> float:
    """One block's cluster indices and norms, written to ``work``; its summed cosine."""
    units, norms = _unit(_rows(src, start, stop))
    best, cos = _assign(units, centroids, start, exact)
    storage.save_npz(storage.join(work, f"block-{start:012d}.npz"),
                     clusters=best.astype(np.int32), norms=norms.astype(np.float32))
    return float(cos.sum(dtype=np.float64))


def _write_task(model: str, out: str, work: str, starts: list[int], centroids: np.ndarray,
                dtype: str, scale: str, facts: dict) -> int:
    """Gather the blocks' indices and norms and write the clustered model folder to ``out``."""
    from swe.model_io import save_clustered

    parts = [storage.load_npz(storage.join(work, f"block-{s:012d}.npz")) for s in starts]
    clusters = np.concatenate([p["clusters"] for p in parts])
    norms = np.concatenate([p["norms"] for p in parts])
    return save_clustered(model, out, centroids.astype(np.float32), clusters, norms, dtype,
                          scale, facts)


def _check(clusters: int, dtype: str, scale: str, iterations: int) -> None:
    if isinstance(clusters, bool) or not isinstance(clusters, int) or clusters < 2:
        raise ValueError(f"--clusters must be an integer of at least 2, got {clusters!r}")
    if dtype not in DTYPES or scale not in SCALES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)} and --scale one of "
                         f"{', '.join(SCALES)}; got {dtype!r}, {scale!r}")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"--iterations must be a positive integer, got {iterations!r}")
    if scale != "row" and dtype != "int8":
        raise ValueError(f"--scale {scale} applies to --dtype int8 only (the centroids are "
                         f"{dtype}); leave --scale out or add --dtype int8")


SCRATCH = "_quantize_work"  # the final pass's indices and norms, inside the output meanwhile
#: The files a quantize writes (patterns of their paths, recorded in the output's lease, so a
#: rerun clears what a killed run wrote), besides the source's tokenizer file.
WRITES = (r"vocab\.txt", r"model\.safetensors", r"config\.json", rf"{SCRATCH}/block-\d{{12}}\.npz")


def _check_output(model: str, out: str) -> str:
    """The output as a job may use it: not the input, not inside or around it, and empty."""
    out = storage.output_url(out)
    storage.refuse_file_output(out)
    if storage.overlaps(model, out):
        raise ValueError(f"--output {out} overlaps the input model {model}; name a new folder")
    refuse_inside(out)
    if holds_others_files(out):
        raise _not_empty(out)
    return out


def _not_empty(out: str) -> FileExistsError:
    return FileExistsError(f"--output {out} exists and is not empty; name a new folder (a "
                           "quantized model is never written over another folder)")


def quantize_model(model: str, out: str, clusters: int, *, dtype: str = "float16",
                   scale: str = "row", seed: int = 0, iterations: int = 20,
                   tolerance: float = 1e-4, exact: int = 0) -> ClusterReport:
    """Cluster the rows of the model at ``model`` into ``clusters`` centroids (spherical
    k-means, at most ``iterations`` passes, stopping once the mean cosine gains less than
    ``tolerance``) and write the clustered model to ``out`` (centroids saved as ``dtype``).
    The first ``exact`` rows (in swe's vocabularies: the most frequent words) keep their own
    direction as ``exact`` of the centroids."""
    _check(clusters, dtype, scale, iterations)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"--seed must be an integer >= 0, got {seed!r}")
    model = storage.absolute(model)
    src = _source(model)
    out = _check_output(model, out)
    if clusters > src.words:
        raise ValueError(f"--clusters {clusters} exceeds the model's {src.words} words")
    if isinstance(exact, bool) or not isinstance(exact, int) or not 0 <= exact < clusters:
        raise ValueError(f"--exact must be an integer from 0 to --clusters - 1 ({clusters - 1}),"
                         f" got {exact!r}")
    tokenizer = ModelFolder(model).config.get("tokenizer")
    writes = [*WRITES, *([re.escape(tokenizer)] if isinstance(tokenizer, str) else [])]
    with lease_new_folder(out, "quantize", _not_empty, writes=writes) as lease:  # one writer
        copied = ["vocab.txt", *([tokenizer] if isinstance(tokenizer, str) else [])]
        lease.record_files({n: storage.read_bytes(storage.join(model, n)) for n in copied})
        return _cluster(model, out, src, clusters, dtype, scale, seed, iterations, tolerance,
                        exact)


def _cluster(model: str, out: str, src: _Source, clusters: int, dtype: str, scale: str,
             seed: int, iterations: int, tolerance: float, exact: int) -> ClusterReport:
    """The k-means passes in tasks, then :func:`_finish`."""
    import ray

    from swe.raysetup import init_ray

    t0 = time.perf_counter()
    init_ray()
    blocks = [(a, min(a + _BLOCK_ROWS, src.words)) for a in range(0, src.words, _BLOCK_ROWS)]
    task = ray.remote(num_cpus=1)
    source_bytes = ray.get(task(_verify_task).remote(model))
    centroids = _initial(task(_seed_task), src, blocks, clusters, seed, exact)
    sums_task, passes, mean_cos, empty = task(_sums_task), 0, -1.0, 0
    for passes in range(1, iterations + 1):
        ref = ray.put(centroids)
        totals = np.zeros(centroids.shape, np.float64)
        counts = np.zeros(clusters, np.int64)
        cos = 0.0
        for s, c, total in ray.get([sums_task.remote(src, a, b, ref, exact)
                                    for a, b in blocks]):
            totals += s
            counts += c
            cos += total
        gain, mean_cos = cos / src.words - mean_cos, cos / src.words
        empty = int((counts == 0).sum())
        norms = np.linalg.norm(totals, axis=1, keepdims=True)
        new = np.where(norms > 0, totals / np.where(norms > 0, norms, 1), centroids)
        new[:exact] = centroids[:exact]  # the exact rows' own directions stay
        centroids = new.astype(np.float32)
        log.info("quantize: pass %d, mean cosine %.4f, %d empty clusters", passes, mean_cos,
                 empty)
        if gain < tolerance:
            break
    return _finish(model, out, src, blocks, centroids, dtype, scale, task, {
        "clusters": clusters, "seed": seed, "passes": passes, "empty_clusters": empty,
        "exact": exact,
        "source_bytes": source_bytes, "t0": t0})


def _initial(seed_task: Any, src: _Source, blocks: list, clusters: int, seed: int,
             exact: int) -> np.ndarray:
    """The first ``exact`` rows, then ``clusters - exact`` distinct rows after them drawn with
    ``seed``, as unit vectors (fetched by tasks)."""
    drawn = np.random.default_rng(seed).choice(src.words - exact, clusters - exact,
                                               replace=False) + exact
    picks = np.concatenate([np.arange(exact), np.sort(drawn)])
    refs = [seed_task.remote(src, a, b, picks[(picks >= a) & (picks < b)]) for a, b in blocks]
    import ray

    return np.concatenate(ray.get(refs)).astype(np.float32)


def _remove_scratch(work: str) -> None:
    """Remove the scratch folder, unless someone put a file there meanwhile: then it is kept,
    with a warning naming it (the blocks are ``.npz``, judged by name and first bytes)."""
    foreign = foreign_files(work)
    if foreign:
        log.warning("kept %s: it holds files quantize did not write (%s)", work,
                    ", ".join(foreign[:3]))
    else:
        storage.remove_tree(work)


def _finish(model: str, out: str, src: _Source, blocks: list, centroids: np.ndarray,
            dtype: str, scale: str, task: Any, facts: dict) -> ClusterReport:
    """The last pass (indices and norms written by the tasks) and the folder, written by one
    task; the scratch folder is removed either way."""
    import ray

    work = storage.join(out, SCRATCH)  # declared in the lease: a killed run's is cleared
    try:
        ref = ray.put(centroids)
        cos = sum(ray.get([task(_final_task).remote(src, a, b, ref, work, facts["exact"])
                           for a, b in blocks]))
        recorded = {"method": "spherical k-means", "source": model, "clusters": facts[
            "clusters"], "exact": facts["exact"], "seed": facts["seed"],
            "passes": facts["passes"], "mean_cosine": round(cos / src.words, 6)}
        written = ray.get(task(_write_task).remote(model, out, work, [a for a, _ in blocks],
                                                   centroids, dtype, scale, recorded))
    finally:  # a half-written output is removed by lease_new_folder
        _remove_scratch(work)
    return ClusterReport(out, src.words, src.dim, facts["clusters"], dtype, facts["passes"],
                         round(cos / src.words, 6), facts["empty_clusters"],
                         facts["source_bytes"], written,
                         round(time.perf_counter() - facts["t0"], 1))
