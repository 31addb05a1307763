"""Translation pairs for ``[pairs.<src>-<tgt>]``: CCMatrix and friends, local or ``s3://``.

Formats (``format``; ``auto`` tells them apart by name and first line):

- ``tsv``: a TSV whose header names the two languages' columns (``en<TAB>de``); no scores.
- ``ccmatrix-tsv``: CCMatrix's own release, headerless ``score<TAB>text1<TAB>text2``; which text
  column is which language comes from ``order``, else the file name (``de-en.tsv.xz``,
  ``CCMatrix.de-en.tsv.gz``), else the section's order.
- ``moses``: OPUS's Moses release, a zip (``de-en.txt.zip``) holding line-aligned members
  ``CCMatrix.de-en.de``, ``CCMatrix.de-en.en`` and ``CCMatrix.de-en.scores`` (README, LICENSE,
  ``.xml`` and other members ignored); also any aligned files ``<stem>.<l1>`` + ``<stem>.<l2>``
  (+ optional ``<stem>.scores``; plain or compressed) given among ``paths``, grouped by stem.
  The language of a member or file is its suffix, never its position in a name.

:func:`plan_sources` turns a section into :class:`PairSource` s (small, picklable, JSON-able);
:func:`read_source` streams one as Arrow tables of kept pairs (``src``, ``tgt``, ``score``,
``pair``), counting every dropped row by reason; :func:`pair_hash` keys the stage's global
dedup and (through ``swe.build.shuffle.shuffle_key``) its reproducible random order.
No Ray, no torch.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import logging
import lzma
import math
import re
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from itertools import islice
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from swe import storage

__all__ = ["FORMATS", "STATS", "PairSource", "PairsConfig", "config_problems", "normalize",
           "pair_hash", "plan_sources", "read_source"]

log = logging.getLogger("swe.build")

FORMATS = {
    "auto": "by name: .zip moses, .tsv by its first line, <stem>.<lang> aligned files",
    "tsv": "TSV whose header names both languages' columns, e.g. en<TAB>de; no scores",
    "ccmatrix-tsv": "headerless score<TAB>text<TAB>text (CCMatrix release), gzip or xz",
    "moses": "OPUS Moses zip (CCMatrix.de-en.de/.en/.scores) or aligned <stem>.<lang> files",
}
STATS = ("read", "kept", "invalid_utf8", "empty", "malformed", "below_min_score", "too_short",
         "too_long", "identical")

# Python's str.isspace() characters: what str.strip()/str.split() remove.
_WS = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
       "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_WS_RUN = (r"[\t-\r\x1c-\x20\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}"
           r"\x{205f}\x{3000}]+")
_WS_ODD = (r"[\t-\r\x1c-\x1f\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}"
           r"\x{205f}\x{3000}]|  ")  # whitespace that is not a lone space
_FLOAT = r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$"
_COMPRESSED = (".gz", ".xz", ".zst", ".bz2")
_PAIR_IN_NAME = re.compile(r"(?<![a-z])([a-z]{2,3})-([a-z]{2,3})(?![a-z])")
_BOM = b"\xef\xbb\xbf"
# What a truncated or corrupt compressed stream (or zip member: bad CRC) raises while read.
_CORRUPT = (EOFError, lzma.LZMAError, zlib.error, gzip.BadGzipFile, zipfile.BadZipFile)


@dataclass
class PairsConfig:
    """Translation pairs for one language pair ``[pairs.<src>-<tgt>]`` (e.g. ``[pairs.en-de]``):
    files, their format, and the per-pair filters; ``dedup``/``max_pairs`` act across files."""

    paths: list[str] = field(default_factory=list, metadata={
        "help": "files or globs (local or s3://): TSV, CCMatrix TSV, OPUS Moses zips, "
                "aligned <stem>.<lang> files"})
    format: str = field(default="auto", metadata={"choices": FORMATS, "help": "file format"})
    order: str = field(default="", metadata={
        "help": "ccmatrix-tsv: languages of the two text columns, e.g. de-en; '' = from the "
                "file name, else the section's order"})
    min_score: float = field(default=float("-inf"), metadata={"infinite": True,
        "help": "drop pairs scoring below this (CCMatrix margin score); sources without "
                "scores (tsv, aligned files without .scores) are not filtered"})
    min_chars: int = field(default=1, metadata={
        "min": 1, "help": "drop pairs with a side shorter (characters, after stripping)"})
    max_chars: int = field(default=1000, metadata={
        "min": 1, "help": "drop pairs with a side longer (characters, after stripping)"})
    drop_identical: bool = field(default=True, metadata={
        "help": "drop pairs whose sides are equal after normalising (untranslated copies)"})
    dedup: bool = field(default=True, metadata={
        "help": "keep one pair per duplicate (normalised src, tgt): the best-scored"})
    max_pairs: int = field(default=0, metadata={
        "min": 0, "help": "0 = all; else keep the best-scored max_pairs (after dedup)"})


@dataclass(frozen=True)
class PairSource:
    """One readable unit of a ``[pairs.*]`` section. ``kind``: ``tsv`` | ``ccmatrix-tsv`` |
    ``moses`` (``paths`` = the zip, ``members`` = its src and tgt members) | ``aligned``
    (``paths`` = the src and tgt files). ``scores``: the scores member or file (``""``: none).
    ``swapped``: ccmatrix-tsv whose first text column is the target language."""

    key: str
    kind: str
    paths: tuple[str, ...]
    members: tuple[str, ...] = ()
    scores: str = ""
    swapped: bool = False

    def __post_init__(self) -> None:
        """Lists (from JSON) back to tuples."""
        object.__setattr__(self, "paths", tuple(self.paths))
        object.__setattr__(self, "members", tuple(self.members))


# -- config and planning ----------------------------------------------------------------------


def _languages(key: str) -> tuple[str, str]:
    src, _, tgt = key.partition("-")
    if not src or not tgt or src == tgt or "-" in tgt:
        raise ValueError(f"[pairs.{key}]: name a pair as SRC-TGT, e.g. [pairs.en-de]")
    return src, tgt


def config_problems(key: str, cfg: PairsConfig) -> list[str]:
    """What is wrong with one section beyond each field's own declaration (no I/O)."""
    problems = []
    try:
        src, tgt = _languages(key)
        _parse_order(cfg.order, src, tgt, key)
    except ValueError as e:
        problems.append(str(e))
    if cfg.min_chars > cfg.max_chars:
        problems.append(f"[pairs.{key}]: min_chars = {cfg.min_chars} is above max_chars = "
                        f"{cfg.max_chars}")
    return problems


def _parse_order(order: str, src: str, tgt: str, key: str) -> tuple[str, str] | None:
    if not order:
        return None
    a, _, b = order.partition("-")
    if {a, b} != {src, tgt}:
        raise ValueError(f"[pairs.{key}] order = {order!r}: name the two text columns' "
                         f"languages, {src}-{tgt} or {tgt}-{src}")
    return a, b


def _split_name(path: str) -> tuple[str, str]:
    """``(stem, suffix)`` of a file name without its compression: ``x/a.de.gz`` → ``x/a``,
    ``de``."""
    for ext in _COMPRESSED:
        if path.endswith(ext):
            path = path[: -len(ext)]
            break
    stem, dot, suffix = path.rpartition(".")
    return (stem, suffix) if dot and "/" not in suffix else (path, "")


def plan_sources(key: str, cfg: PairsConfig) -> list[PairSource]:
    """The section's files (globs expanded) as sources: formats detected, aligned files
    grouped by stem. ``ValueError`` naming the file for anything unreadable as pairs."""
    src, tgt = _languages(key)
    if cfg.format not in FORMATS:
        raise ValueError(f"[pairs.{key}] format = {cfg.format!r}; use {', '.join(FORMATS)}")
    order = _parse_order(cfg.order, src, tgt, key)
    sources: list[PairSource] = []
    aligned: dict[str, dict[str, str]] = {}
    for path in storage.expand_inputs(cfg.paths):
        kind = _detect(path, cfg.format, src, tgt)
        if kind == "aligned":
            stem, suffix = _split_name(path)
            if suffix in aligned.setdefault(stem, {}):
                raise ValueError(f"{path}: a second {stem}.{suffix} file "
                                 f"({aligned[stem][suffix]})")
            aligned[stem][suffix] = path
        elif kind == "moses":
            sources += _zip_sources(key, path, src, tgt)
        else:
            swapped = kind == "ccmatrix-tsv" and _first_column(path, order, src, tgt) == tgt
            sources.append(PairSource(key, kind, (path,), swapped=swapped))
    return sources + [_aligned_source(key, stem, files, src, tgt)
                      for stem, files in aligned.items()]


def _detect(path: str, fmt: str, src: str, tgt: str) -> str:
    """``tsv`` | ``ccmatrix-tsv`` | ``moses`` | ``aligned`` for one file."""
    if fmt in ("tsv", "ccmatrix-tsv"):
        return fmt
    _, suffix = _split_name(path)
    if path.endswith(".zip"):
        return "moses"
    if suffix in (src, tgt, "scores"):
        return "aligned"
    if fmt == "auto" and suffix == "tsv":
        return _sniff_tsv(path, src, tgt)
    what = "zips or <stem>.<lang> files" if fmt == "moses" else "its name"
    raise ValueError(f"{path}: cannot read it as {src}-{tgt} pairs with format = {fmt!r} "
                     f"(by {what}); set format = tsv, ccmatrix-tsv or moses")


def _sniff_tsv(path: str, src: str, tgt: str) -> str:
    """``tsv`` when the first line names both languages, ``ccmatrix-tsv`` when it starts with
    a number."""
    line = _first_line(path)
    fields = [f.strip() for f in line.decode("utf-8", "replace").split("\t")]
    if line and _score(fields[0]) is not None:
        return "ccmatrix-tsv"
    if not line or (src in fields and tgt in fields):
        return "tsv"
    raise ValueError(f"{path}: the first line neither names columns {src!r} and {tgt!r} "
                     "(tsv) nor starts with a score (ccmatrix-tsv); set format")


def _first_line(path: str, limit: int = 1 << 20) -> bytes:
    """The first line of a (compressed) file, reading at most ``limit`` bytes."""
    buf = b""
    with storage.naming(path, "reading"), storage.open_input(path) as f:
        try:
            while b"\n" not in buf and len(buf) < limit and (chunk := f.read(1 << 16)):
                buf += chunk
        except _CORRUPT as e:
            raise ValueError(f"{path}: corrupt compressed file ({type(e).__name__}: {e})") \
                from None
    return buf.split(b"\n", 1)[0].removeprefix(_BOM).rstrip(b"\r")


def _score(text: str) -> float | None:
    """A finite float, or ``None``."""
    if not re.match(_FLOAT, text.strip()):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def _first_column(path: str, order: tuple[str, str] | None, src: str, tgt: str) -> str:
    """The language of a CCMatrix TSV's first text column: ``order``, else the file name."""
    if order:
        return order[0]
    name = path.rsplit("/", 1)[-1]
    for a, b in _PAIR_IN_NAME.findall(name):
        if {a, b} == {src, tgt}:
            return a
    return src


def _zip_sources(key: str, path: str, src: str, tgt: str) -> list[PairSource]:
    """One source per ``<stem>.<src>`` + ``<stem>.<tgt>`` member pair of a Moses zip."""
    fs, p = storage.filesystem(path)
    with storage.naming(path, "reading"), fs.open(p, "rb") as f:
        try:
            names = zipfile.ZipFile(f).namelist()
        except zipfile.BadZipFile as e:
            raise ValueError(f"{path}: not a readable zip ({e})") from None
    groups: dict[str, dict[str, str]] = {}
    for name in names:
        stem, suffix = _split_name(name)
        if suffix in (src, tgt, "scores") and not name.endswith("/"):
            groups.setdefault(stem, {})[suffix] = name
    if not groups:
        raise ValueError(f"{path}: no <stem>.{src} and <stem>.{tgt} members (e.g. "
                         f"CCMatrix.{min(src, tgt)}-{max(src, tgt)}.{src}); it holds "
                         f"{', '.join(names[:8]) or 'nothing'}")
    out = []
    for stem, members in groups.items():
        for lang in (src, tgt):
            if lang not in members:
                raise ValueError(f"{path}: no {lang} member {stem}.{lang} beside "
                                 f"{', '.join(members.values())}")
        out.append(PairSource(key, "moses", (path,), (members[src], members[tgt]),
                              scores=members.get("scores", "")))
    return out


def _aligned_source(key: str, stem: str, files: dict[str, str], src: str,
                    tgt: str) -> PairSource:
    """Aligned ``<stem>.<src>``/``<stem>.<tgt>`` (+ ``.scores``) files as one source."""
    for lang in (src, tgt):
        if lang not in files:
            have = ", ".join(files.values())
            raise ValueError(f"{have}: aligned file(s) without their partner {stem}.{lang} "
                             "among the section's paths")
    return PairSource(key, "aligned", (files[src], files[tgt]), scores=files.get("scores", ""))


# -- reading ----------------------------------------------------------------------------------


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
    except _CORRUPT as e:
        raise ValueError(f"{', '.join(_stream_names(source))}: truncated or corrupt compressed "
                         f"data after {stats['read'] - start:,} pairs ({type(e).__name__}: {e}); "
                         "re-create or re-download it") from None


def _batches(source: PairSource, chunk_rows: int,
             stats: dict[str, int]) -> Iterator[tuple[pa.Array, pa.Array, np.ndarray]]:
    """The source's well-formed rows as ``(src, tgt, score)`` arrays, chunk by chunk."""
    src, tgt = _languages(source.key)
    if source.kind in ("tsv", "ccmatrix-tsv"):
        return _tsv_batches(source, src, tgt, chunk_rows, stats)
    if source.kind in ("moses", "aligned"):
        return _aligned_batches(source, chunk_rows, stats)
    raise ValueError(f"{source.paths[0]}: unknown source kind {source.kind!r}")


def _lines(f: BinaryIO) -> Iterator[bytes]:
    """Lines of a stream, a leading UTF-8 byte-order mark dropped."""
    lines = storage.iter_lines(f)
    first = next(lines, None)
    if first is not None:
        yield first.removeprefix(_BOM)
        yield from lines


def _tsv_batches(source: PairSource, src: str, tgt: str, chunk_rows: int,
                 stats: dict[str, int]) -> Iterator[tuple[pa.Array, pa.Array, np.ndarray]]:
    """``(src, tgt, score)`` arrays of the well-formed rows of a TSV, chunk by chunk."""
    path = source.paths[0]
    with storage.naming(path, "reading"), storage.open_input(path) as f:
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
    blank = ok & (pc.utf8_length(pc.utf8_trim(text, _WS)).to_numpy() == 0)
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
    texts = pc.utf8_trim(texts, _WS)
    try:
        values = pc.cast(texts, pa.float64()).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:
        good = pc.fill_null(pc.match_substring_regex(texts, _FLOAT), False).to_numpy(
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
        return storage.open_input([*source.paths, source.scores][i])
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
    xs, ys = pc.utf8_trim(xs, _WS), pc.utf8_trim(ys, _WS)
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


# -- hashing ----------------------------------------------------------------------------------


@functools.cache
def _fold_fixups() -> str:
    """A regex class of the characters where Arrow's ``utf8_lower`` (then ß → ss) differs
    from Python's ``str.casefold`` (ſ, ς, µ, ligatures, Cherokee ...), computed once per
    process (no character above U+1FFFF has a case)."""
    chars = [chr(c) for c in range(1, 0x20000) if not 0xD800 <= c < 0xE000]
    joined = "\0".join(chars)
    folded = joined.casefold().split("\0")
    lowered = _lower(pa.array([joined]))[0].as_py().split("\0")
    special = [ord(c) for c, f, lo in zip(chars, folded, lowered, strict=True) if f != lo]
    runs: list[list[int]] = []
    for c in special:
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return "[" + "".join(rf"\x{{{a:x}}}" + (rf"-\x{{{b:x}}}" if b > a else "")
                         for a, b in runs) + "]"


def _lower(texts: pa.Array) -> pa.Array:
    """Arrow's lowercase with ß as ss: casefolding for all but :func:`_fold_fixups`."""
    return pc.replace_substring(pc.utf8_lower(texts), "ß", "ss")


def _as_array(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One string array, nulls as ``""``."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if texts.type != pa.string():
        texts = texts.cast(pa.string())
    return pc.fill_null(texts, "")


def normalize(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each text stripped, casefolded, whitespace runs made one space: exactly
    ``" ".join(s.casefold().split())`` in Python, vectorised."""
    texts = _as_array(texts)
    out = _lower(pc.utf8_trim(texts, _WS))
    odd = pc.match_substring_regex(out, _WS_ODD)
    if odd.true_count:
        runs = pc.replace_substring_regex(out.filter(odd), _WS_RUN, " ")
        out = pc.replace_with_mask(out, odd, runs)
    special = pc.match_substring_regex(texts, _fold_fixups())
    if special.true_count:
        fixed = [" ".join(s.casefold().split()) for s in texts.filter(special).to_pylist()]
        out = pc.replace_with_mask(out, special, pa.array(fixed, pa.string()))
    return out


def pair_hash(src: pa.Array | pa.ChunkedArray, tgt: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A stable 64-bit hash (uint64) of each (normalised src, normalised tgt): BLAKE2b of
    ``src + TAB + tgt`` (normalised text has no tab), the same in every process and run."""
    joined = pc.binary_join_element_wise(normalize(src), normalize(tgt), "\t")
    blake = hashlib.blake2b
    digests = b"".join([blake(v, digest_size=8, person=b"swe-pair").digest()
                        for v in joined.cast(pa.binary()).to_pylist()])
    return np.frombuffer(digests, "<u8").astype(np.uint64)
