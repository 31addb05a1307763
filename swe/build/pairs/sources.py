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
``swe.build.pairs.readers.read_source`` streams one as Arrow tables of kept pairs, and
``swe.build.pairs.text.pair_hash`` keys the stage's global dedup and random order.
No Ray, no torch.
"""

from __future__ import annotations

import logging
import math
import re
import zipfile
from dataclasses import dataclass, field

from swe import inputs, storage
from swe.build.pairs.text import BOM, CORRUPT, FLOAT_SYNTAX

__all__ = ["FORMATS", "STATS", "PairSource", "PairsConfig", "config_problems", "languages",
           "plan_sources"]

log = logging.getLogger("swe.build")

FORMATS = {
    "auto": "by name: .zip moses, .tsv by its first line, <stem>.<lang> aligned files",
    "tsv": "TSV whose header names both languages' columns, e.g. en<TAB>de; no scores",
    "ccmatrix-tsv": "headerless score<TAB>text<TAB>text (CCMatrix release), gzip or xz",
    "moses": "OPUS Moses zip (CCMatrix.de-en.de/.en/.scores) or aligned <stem>.<lang> files",
}
STATS = ("read", "kept", "invalid_utf8", "empty", "malformed", "below_min_score", "too_short",
         "too_long", "identical")

_COMPRESSED = (".gz", ".xz", ".zst", ".bz2")
_PAIR_IN_NAME = re.compile(r"(?<![a-z])([a-z]{2,3})-([a-z]{2,3})(?![a-z])")


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
    dev_documents: str = field(default="", metadata={
        "help": "tsv: a file of document ids, one per data row of the section's first "
                "file (e.g. NTREX-128's document_ids.txt): a fixed tenth of the documents (by "
                "a seeded hash of the id) is held out, the same for every pair section; pairs "
                "whose source sentence is in one of them are validation, the rest train ('' = "
                "the last rows by shuffle key)"})
    dev_share: float = field(default=0.0, metadata={
        "min": 0.0, "max": 0.5,
        "help": "a seeded share of the source sentences is held out: their pairs are "
                "validation in every section and file (with dev_documents: every file but "
                "the first); chosen by the sentence, so one English sentence translated into "
                "many languages is held out in all of them; 0 = off"})


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


def languages(key: str) -> tuple[str, str]:
    """The two languages of a section key (``en-de`` → ``("en", "de")``, ``en-zho-CN`` →
    ``("en", "zho-CN")``: the split that names two known codes); bad keys raise."""
    from swe.text import LANGUAGES

    for i, ch in enumerate(key):
        if ch == "-" and key[:i] in LANGUAGES and key[i + 1:] in LANGUAGES \
                and key[:i] != key[i + 1:]:
            return key[:i], key[i + 1:]
    src, _, tgt = key.partition("-")
    if not src or not tgt or src == tgt or "-" in tgt:
        raise ValueError(f"[pairs.{key}]: name a pair as SRC-TGT, e.g. [pairs.en-de]")
    return src, tgt


def config_problems(key: str, cfg: PairsConfig) -> list[str]:
    """What is wrong with one section beyond each field's own declaration (no I/O)."""
    problems = []
    try:
        src, tgt = languages(key)
        _parse_order(cfg.order, src, tgt, key)
    except ValueError as e:
        problems.append(str(e))
    if cfg.min_chars > cfg.max_chars:
        problems.append(f"[pairs.{key}]: min_chars = {cfg.min_chars} is above max_chars = "
                        f"{cfg.max_chars}")
    if cfg.dev_documents and len(cfg.paths) > 1 and any(c in cfg.paths[0] for c in "*?["):
        problems.append(f"[pairs.{key}]: dev_documents describes the first file of paths, "
                        f"which must then be one file, not the glob {cfg.paths[0]!r}")
    if cfg.dev_documents and cfg.format not in ("auto", "tsv"):
        problems.append(f"[pairs.{key}]: dev_documents needs TSV files (one document id per "
                        f"data row), not format = {cfg.format!r}")
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
    src, tgt = languages(key)
    if cfg.format not in FORMATS:
        raise ValueError(f"[pairs.{key}] format = {cfg.format!r}; use {', '.join(FORMATS)}")
    order = _parse_order(cfg.order, src, tgt, key)
    sources: list[PairSource] = []
    aligned: dict[str, dict[str, str]] = {}
    for path in inputs.expand_inputs(cfg.paths):
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
    with storage.naming(path, "reading"), inputs.open_input(path) as f:
        try:
            while b"\n" not in buf and len(buf) < limit and (chunk := f.read(1 << 16)):
                buf += chunk
        except CORRUPT as e:
            raise ValueError(f"{path}: corrupt compressed file ({type(e).__name__}: {e})") \
                from None
    return buf.split(b"\n", 1)[0].removeprefix(BOM).rstrip(b"\r")


def _score(text: str) -> float | None:
    """A finite float, or ``None``."""
    if not re.match(FLOAT_SYNTAX, text.strip()):
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


