"""Streaming one planned :class:`~swe.build.pairs.PairSource` as Arrow tables of kept pairs
(``src``, ``tgt``, ``score``, ``pair``): TSV with a header, CCMatrix's headerless TSV, and
line-aligned files or Moses zip members read in lockstep; both sides stripped and filtered, every
dropped row counted by reason (:data:`~swe.build.pairs.STATS`). No Ray, no torch.
"""

from __future__ import annotations

import hashlib
import logging
import math
import zipfile
from collections.abc import Iterator
from contextlib import ExitStack
from itertools import islice
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from swe import inputs, storage
from swe.build.pairs.sources import STATS, PairsConfig, PairSource, languages
from swe.build.pairs.text import BOM, CORRUPT, FLOAT_SYNTAX, WHITESPACE, normalize

__all__ = ["dev_sources", "held_out_documents", "read_source"]

log = logging.getLogger("swe.build")


def read_source(source: PairSource, cfg: PairsConfig, stats: dict[str, int],
                chunk_rows: int = 65536) -> Iterator[pa.Table]:
    """Stream one source as tables of kept pairs (``src``, ``tgt``, ``score`` float64 NaN when
    unscored, ``pair``) of at most ``chunk_rows`` rows; counts into ``stats`` (keys
    :data:`STATS`). ``ValueError`` when aligned files differ in length."""
    for k in STATS:
        stats.setdefault(k, 0)
    scored = source.kind == "ccmatrix-tsv" or bool(source.scores)
    if cfg.min_score > -math.inf and not scored:
        log.warning("[pairs.%s] %s has no scores: min_score = %s not applied", source.key,
                    source.paths[0], cfg.min_score)
    start = stats["read"]
    try:
        for xs, ys, scores in _batches(source, chunk_rows, stats):
            table = _keep(xs, ys, scores, cfg, source.key, stats)
            if table.num_rows:
                yield table
    except CORRUPT as e:
        raise ValueError(f"{', '.join(_stream_names(source))}: truncated or corrupt compressed "
                         f"data after {stats['read'] - start:,} pairs ({type(e).__name__}: {e}); "
                         "re-create or re-download it") from None


def held_out_documents(ids: list[str], seed: int) -> set[str]:
    """A fixed tenth of the distinct document ids (at least one): those first by a seeded hash
    of the id, so the same documents whichever language's file lists them."""
    distinct = sorted(set(ids), key=lambda d: hashlib.sha256(f"{seed}:{d}".encode()).digest())
    return set(distinct[: max(1, math.ceil(len(distinct) / 10))])


def dev_sources(source: PairSource, cfg: PairsConfig, seed: int) -> set[str]:
    """The source sentences (stripped) of the rows of a TSV source that belong to held-out
    documents (``cfg.dev_documents``: one document id per data row)."""
    doc_file = storage.data_path(cfg.dev_documents)
    ids = [line.strip() for line in storage.read_text(doc_file).splitlines()]
    while ids and not ids[-1]:
        ids.pop()
    held = held_out_documents(ids, seed)
    path, (src, tgt) = source.paths[0], languages(source.key)
    out: set[str] = set()
    rows = 0
    with storage.naming(path, "reading"), inputs.open_input(path) as f:
        lines = _lines(f)
        header = next(lines, None)
        if header is None:
            return out
        _, (col, _) = _header_columns(path, header, src, tgt)
        for rows, line in enumerate(lines, 1):
            if rows <= len(ids) and ids[rows - 1] in held:
                fields = line.decode("utf-8", "replace").split("\t")
                if col < len(fields):
                    out.add(fields[col].strip(WHITESPACE))
    if rows != len(ids):
        raise ValueError(f"{path} has {rows:,} data rows but {doc_file} lists {len(ids):,} "
                         "document ids (one per row is needed): is it the file's own list?")
    return out


def _batches(source: PairSource, chunk_rows: int,
             stats: dict[str, int]) -> Iterator[tuple[pa.Array, pa.Array, np.ndarray]]:
    """The source's well-formed rows as ``(src, tgt, score)`` arrays, chunk by chunk."""
    src, tgt = languages(source.key)
    if source.kind in ("tsv", "ccmatrix-tsv"):
        return _tsv_batches(source, src, tgt, chunk_rows, stats)
    if source.kind in ("moses", "aligned"):
        return _aligned_batches(source, chunk_rows, stats)
    raise ValueError(f"{source.paths[0]}: unknown source kind {source.kind!r}")


def _lines(f: BinaryIO) -> Iterator[bytes]:
    """Lines of a stream, a leading UTF-8 byte-order mark dropped."""
    lines = inputs.iter_lines(f)
    first = next(lines, None)
    if first is not None:
        yield first.removeprefix(BOM)
        yield from lines


def _tsv_batches(source: PairSource, src: str, tgt: str, chunk_rows: int,
                 stats: dict[str, int]) -> Iterator[tuple[pa.Array, pa.Array, np.ndarray]]:
    """``(src, tgt, score)`` arrays of the well-formed rows of a TSV, chunk by chunk."""
    path = source.paths[0]
    with storage.naming(path, "reading"), inputs.open_input(path) as f:
        lines = _lines(f)
        if source.kind == "tsv":
            header = next(lines, None)
            if header is None:
                return
            ncols, cols = _header_columns(path, header, src, tgt)
        else:
            ncols, cols = 3, ((2, 1) if source.swapped else (1, 2))
        while batch := list(islice(lines, chunk_rows)):
            stats["read"] += len(batch)
            yield _split_rows(batch, ncols, cols, source.kind == "ccmatrix-tsv", stats)


def _header_columns(path: str, header: bytes, src: str,
                    tgt: str) -> tuple[int, tuple[int, int]]:
    """The number of columns and the src/tgt column indices named by a TSV header."""
    fields = [f.strip() for f in header.decode("utf-8", "replace").split("\t")]
    if src not in fields or tgt not in fields:
        raise ValueError(f"{path}: the header {fields} must name columns {src!r} and {tgt!r} "
                         "(e.g. 'en<TAB>de')")
    return len(fields), (fields.index(src), fields.index(tgt))


def _split_rows(batch: list[bytes], ncols: int, cols: tuple[int, int], scored: bool,
                stats: dict[str, int]) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """Decode and split TSV lines; blank lines count as ``empty``, a wrong field count or
    score as ``malformed``, bytes that are not UTF-8 as ``invalid_utf8``."""
    text, ok = _decode(batch)
    stats["invalid_utf8"] += int((~ok).sum())
    blank = ok & (pc.utf8_length(pc.utf8_trim(text, WHITESPACE)).to_numpy() == 0)
    stats["empty"] += int(blank.sum())
    parts = pc.split_pattern(text, "\t")
    bad = ok & ~blank & (pc.list_value_length(parts).to_numpy() != ncols)
    ok &= ~blank & ~bad
    parts = parts.filter(ok)
    scores = np.full(len(parts), np.nan)
    if scored:
        scores, good = _parse_scores(pc.list_element(parts, 0))
        bad[np.flatnonzero(ok)[~good]] = True
        parts, scores = parts.filter(good), scores[good]
    stats["malformed"] += int(bad.sum())
    return pc.list_element(parts, cols[0]), pc.list_element(parts, cols[1]), scores


def _decode(lines: list[bytes]) -> tuple[pa.Array, np.ndarray]:
    """Lines as a string array (``""`` where not UTF-8) and the mask of valid ones."""
    ok = np.ones(len(lines), bool)
    try:
        return pa.array(lines, pa.binary()).cast(pa.string()), ok
    except pa.ArrowInvalid:
        out = []
        for i, line in enumerate(lines):
            try:
                out.append(line.decode("utf-8"))
            except UnicodeDecodeError:
                out.append("")
                ok[i] = False
        return pa.array(out, pa.string()), ok


def _parse_scores(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Finite floats (NaN where not) and the mask of parsable ones."""
    texts = pc.utf8_trim(texts, WHITESPACE)
    try:
        values = pc.cast(texts, pa.float64()).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:
        good = pc.fill_null(pc.match_substring_regex(texts, FLOAT_SYNTAX), False).to_numpy(
            zero_copy_only=False)
        values = np.full(len(texts), np.nan)
        values[good] = pc.cast(texts.filter(pa.array(good)), pa.float64()).to_numpy(
            zero_copy_only=False)
    good = np.isfinite(values)
    return values, good


def _aligned_batches(source: PairSource, chunk_rows: int,
                     stats: dict[str, int]) -> Iterator[tuple[pa.Array, pa.Array, np.ndarray]]:
    """``(src, tgt, score)`` arrays from line-aligned streams read in lockstep."""
    names = _stream_names(source)
    with ExitStack() as stack:
        its = [_lines(stack.enter_context(_open_stream(source, i)))
               for i in range(len(names))]
        done = 0
        while True:
            parts = [list(islice(it, chunk_rows)) for it in its]
            if len({len(p) for p in parts}) > 1:
                _mismatch(names, [done + len(p) + sum(1 for _ in it)
                                  for p, it in zip(parts, its, strict=True)])
            if not parts[0]:
                return
            done += len(parts[0])
            stats["read"] += len(parts[0])
            yield _aligned_rows(parts, stats)


def _stream_names(source: PairSource) -> list[str]:
    """How each stream of an aligned source is named in messages (src, tgt[, scores])."""
    if source.kind == "moses":
        zip_url = source.paths[0]
        members = [*source.members, *([source.scores] if source.scores else [])]
        return [f"{zip_url}:{m}" for m in members]
    return [*source.paths, *([source.scores] if source.scores else [])]


def _open_stream(source: PairSource, i: int) -> BinaryIO:
    """Stream ``i`` (src, tgt, scores) of an aligned source: a file, or a zip member read
    through its own handle on the zip (so each stream reads its member sequentially)."""
    if source.kind == "aligned":
        return inputs.open_input([*source.paths, source.scores][i])
    member = [*source.members, source.scores][i]
    fs, p = storage.filesystem(source.paths[0])
    f = fs.open(p, "rb")
    try:
        return _MemberStream(zipfile.ZipFile(f), member, f)
    except BaseException:
        f.close()
        raise


class _MemberStream:
    """A zip member opened for reading that closes its zip and file with it."""

    def __init__(self, zf: zipfile.ZipFile, member: str, f: BinaryIO) -> None:
        self._zf, self._f = zf, f
        self._m = zf.open(member)

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` decompressed bytes."""
        return self._m.read(n)

    def __enter__(self) -> _MemberStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self._m.close()
        self._zf.close()
        self._f.close()


def _mismatch(names: list[str], counts: list[int]) -> None:
    """Raise the error for aligned streams of different lengths, naming both and counts."""
    i = next(i for i in range(1, len(counts)) if counts[i] != counts[0])
    raise ValueError(f"aligned files differ in length: {names[0]} has {counts[0]:,} lines, "
                     f"{names[i]} has {counts[i]:,}")


def _aligned_rows(parts: list[list[bytes]],
                  stats: dict[str, int]) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """Decode one chunk of aligned lines; drop and count invalid UTF-8 and bad scores."""
    xs, ok_x = _decode(parts[0])
    ys, ok_y = _decode(parts[1])
    ok = ok_x & ok_y
    stats["invalid_utf8"] += int((~ok).sum())
    scores = np.full(len(ok), np.nan)
    if len(parts) > 2:
        text, ok_s = _decode(parts[2])
        scores, good = _parse_scores(text)
        bad = ok & ~(good & ok_s)
        stats["malformed"] += int(bad.sum())
        ok &= ~bad
    if ok.all():
        return xs, ys, scores
    mask = pa.array(ok)
    return xs.filter(mask), ys.filter(mask), scores[ok]


def _keep(xs: pa.Array, ys: pa.Array, scores: np.ndarray, cfg: PairsConfig, key: str,
          stats: dict[str, int]) -> pa.Table:
    """Strip both sides and apply the per-pair filters, counting each drop by its first
    reason (empty, below_min_score, too_short, too_long, identical)."""
    xs, ys = pc.utf8_trim(xs, WHITESPACE), pc.utf8_trim(ys, WHITESPACE)
    lx = pc.utf8_length(xs).to_numpy(zero_copy_only=False)
    ly = pc.utf8_length(ys).to_numpy(zero_copy_only=False)
    drop = np.zeros(len(lx), bool)
    for reason, hit in (("empty", (lx == 0) | (ly == 0)),
                        ("below_min_score", scores < cfg.min_score),
                        ("too_short", (lx < cfg.min_chars) | (ly < cfg.min_chars)),
                        ("too_long", (lx > cfg.max_chars) | (ly > cfg.max_chars))):
        hit &= ~drop
        stats[reason] += int(hit.sum())
        drop |= hit
    if cfg.drop_identical and not drop.all():
        live = np.flatnonzero(~drop)
        alive = pa.array(~drop)
        same = pc.equal(normalize(xs.filter(alive)), normalize(ys.filter(alive)))
        hit = live[same.to_numpy(zero_copy_only=False)]
        stats["identical"] += len(hit)
        drop[hit] = True
    keep = pa.array(~drop)
    n = len(drop) - int(drop.sum())
    stats["kept"] += n
    return pa.table({"src": xs.filter(keep), "tgt": ys.filter(keep),
                     "score": pa.array(scores[~drop], pa.float64()),
                     "pair": pa.repeat(pa.scalar(key, pa.string()), n)})
