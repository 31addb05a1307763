"""Stage ``corpus``: input files → Parquet shards of non-blank lines.

A compressed file cannot be read in parallel, so one task streams each input file once into
shards of ``shard_lines`` lines; every later pass reads those shards in parallel. CC-100's layout
(one paragraph per line, blank lines between documents, one huge ``.xz`` per language) is exactly
this: blank lines are dropped, paragraphs are split into sentences in the next stage. Lines that
are not valid UTF-8 are counted and skipped, decoded with U+FFFD, or stop the build
(``corpus.<lang>.on_bad_bytes``); a truncated or corrupt compressed file stops it, naming the file.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from swe import inputs, storage
from swe.build.markers import StageDir
from swe.build.outputs import hashed_corpus
from swe.build.stage import LogPhrases, Section, StageResult
from swe.build.tasks import MiB, remote, run_sharded
from swe.inputs import input_format, iter_lines, open_input

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.context import BuildContext

__all__ = ["CorpusConfig", "Result", "shard_file", "tsv_column"]

NAME = "corpus"
FORMATS = ("auto", "text", "jsonl", "parquet", "tsv")
BAD_BYTES = ("skip", "replace", "error")


@dataclass
class CorpusConfig:
    """One language's corpus ``[corpus.<lang>]``: files/globs (local or s3://)."""

    paths: list[str] = field(default_factory=list, metadata={
        "help": "files, globs or directories (local or s3://)"})
    paths_if_present: list[str] = field(default_factory=list, metadata={
        "help": "files read when they exist, e.g. in [corpus.\"*\"] a monolingual file "
                "{data}/multilingual/{lang}.txt.xz that only some languages have"})
    format: str = field(default="auto", metadata={
        "choices": FORMATS, "help": "input format; tsv: a header row names the columns"})
    text_column: str = field(default="text", metadata={
        "nonempty": True, "help": "Parquet/JSONL field or TSV header, e.g. de"})
    split_sentences: bool = field(default=True, metadata={
        "help": "false when the corpus is already one sentence per line"})
    max_lines: int = field(default=0, metadata={"min": 0, "help": "0 = all lines; a cap"})
    shard_lines: int = field(default=50_000, metadata={"min": 1, "help": "lines per shard"})
    on_bad_bytes: str = field(default="skip", metadata={
        "choices": BAD_BYTES, "help": "a line that is not UTF-8: skip, replace (U+FFFD), error"})

    def files(self) -> list[str]:
        """The files of ``paths`` (each must match), then those of ``paths_if_present`` that
        exist."""
        return inputs.expand_inputs(self.paths + inputs.present(self.paths_if_present))


SECTION = Section("corpus", CorpusConfig, keyed="corpus.<lang>",
                  example="languages, e.g. [corpus.en]")


@dataclass(frozen=True, kw_only=True)
class Result(StageResult):
    """Line shards per language (``{"path", "lines"}`` each, in corpus order)."""

    LOG: ClassVar[LogPhrases] = {"shards": None, "lines": ("{} lines", "lines"),
                                 "invalid_utf8_lines": ("{} not UTF-8, skipped", None),
                                 "fingerprints": None}

    shards: dict[str, list[dict]]
    lines: int
    invalid_utf8_lines: int
    fingerprints: dict[str, str] = field(default_factory=dict)  # per language: input_fingerprint


def validate(cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
    """Problems with ``[corpus.*]``, appended to ``errors``."""
    from swe.build.fields import check_readable

    for lang in cfg.languages:
        if lang not in cfg.corpus or not cfg.corpus[lang].paths:
            errors.append(f"no corpus for language {lang!r}: add [corpus.{lang}] paths = [...]")
    for lang, c in cfg.corpus.items():
        if lang not in cfg.languages:
            errors.append(f"[corpus.{lang}] given but {lang!r} is not in languages")
        errors.extend(f"corpus.{lang}.paths_if_present: {p!r} is not a path (empty, or holding "
                      "a NUL byte)" for p in c.paths_if_present if not p.strip() or "\0" in p)
        if check_paths:
            optional = [p for p in c.paths_if_present if p.strip() and "\0" not in p]
            check_readable([*c.paths, *inputs.present(optional)], f"corpus.{lang}", errors)
            _check_formats(c, lang, errors)


def _check_formats(c: CorpusConfig, lang: str, errors: list[str]) -> None:
    """Before any task starts: an error for a corpus file whose format can't be told or whose
    TSV header lacks the language's column, and for a language whose files hold no text."""
    try:
        files = c.files()
    except (OSError, ValueError):
        return  # check_readable said why
    texts = 0
    for path in files:
        fmt, col = tsv_column(path, c.format, c.text_column, lang)
        try:
            if fmt != "tsv":
                fmt = input_format(path, fmt, f"corpus.{lang}.format")[0]
            texts += _has_text(path, fmt, col, f"corpus.{lang}.format")
        except ValueError as e:
            errors.append(str(e))
            return
        except OSError as e:
            errors.append(f"corpus.{lang}: cannot read {path} ({e})")
            return
    if files and not texts:
        errors.append(f"corpus.{lang}: its files hold no text ({', '.join(files[:3])}"
                      f"{' …' if len(files) > 3 else ''}): add text, or leave {lang!r} out")


def _has_text(path: str, fmt: str, column: str, flag: str) -> bool:
    """Whether a corpus file holds a row of text (a TSV's header must name ``column``; a
    Parquet file must have it, as text: checked here rather than in the corpus stage's tasks).
    A Parquet file's column is read until its first non-blank text. ``flag``: the format's
    setting, named when a text file holds Parquet data."""
    if fmt == "parquet":
        with open_input(path) as f:
            parquet = pq.ParquetFile(f)
            _check_text_column(path, parquet.schema_arrow, column)
            return any(any(t and t.strip() for t in b.column(0).to_pylist())
                       for b in parquet.iter_batches(batch_size=4096, columns=[column]))
    lines = inputs.peek_lines(path, 2 if fmt == "tsv" else 1, flag)
    if fmt == "tsv" and lines:
        header = [h.strip() for h in lines[0].decode("utf-8", "replace").split("\t")]
        if column not in header:
            raise ValueError(f"{path}: the TSV header {header} has no column {column!r} for "
                             f"this language; check the file or corpus.<lang>.text_column")
        return len(lines) > 1
    return bool(lines)


def enabled(cfg: BuildConfig) -> bool:
    """Always runs."""
    return True


def needs(cfg: BuildConfig) -> tuple[str, ...]:
    """The first stage."""
    return ()


def hash_fields(cfg: BuildConfig, teacher: str) -> tuple:
    """Languages and every corpus setting."""
    return cfg.languages, hashed_corpus(cfg)


def run(ctx: BuildContext, st: StageDir, done: Mapping[str, StageResult]) -> Result:
    """Shard every input file in parallel (one task per file, resumable per file)."""
    cfg = ctx.cfg
    lines = max(c.shard_lines for c in cfg.corpus.values())
    shard = remote(shard_file, 256 * MiB + lines * 600, "corpus", "corpus.<lang>.shard_lines")
    jobs, langs = [], []
    for lang in cfg.languages:
        c = cfg.corpus[lang]
        for i, path in enumerate(c.files()):
            prefix = st.path(lang, f"f{i:04d}")
            fmt, col = tsv_column(path, c.format, c.text_column, lang)
            jobs.append((f"{lang}-f{i:04d}", lambda p=path, c=c, x=prefix, f=fmt, t=col:
                         shard.remote(p, f, t, x, c.max_lines, c.shard_lines, c.on_bad_bytes)))
            langs.append(lang)
    results = run_sharded(st, jobs)
    shards: dict[str, list] = {lang: [] for lang in cfg.languages}
    for lang, r in zip(langs, results, strict=True):
        shards[lang].extend(r["shards"])
        _warn_about(st, r, cfg.corpus[lang].on_bad_bytes, lang)
    for lang in cfg.languages:
        shards[lang] = _cap(shards[lang], cfg.corpus[lang].max_lines)
    lines = sum(s["lines"] for v in shards.values() for s in v)
    if not lines:
        raise ValueError("the corpus has no non-blank lines of UTF-8 text: see the warnings "
                         "above, and check [corpus] paths")
    return Result(shards=shards, lines=lines,
                  invalid_utf8_lines=sum(r["invalid_utf8_lines"] for r in results),
                  fingerprints={lang: input_fingerprint(cfg.corpus[lang])
                                for lang in cfg.languages})


#: Bytes read from each end of a corpus file for its fingerprint.
_ENDS = 1 << 16


def input_fingerprint(c: CorpusConfig) -> str:
    """A hash of the names, sizes and first and last 64 KiB of the files a corpus table reads
    (paths expanded): it changes when a file is added to a folder or glob, removed, or
    rewritten (an edit that keeps the size changes the bytes at an end, unless it falls only
    in the middle of a file over 128 KiB), and not when the data folder is moved or copied
    (names are the files' own, not their paths; modification times are not used). Two small
    reads per file, whatever its size."""
    h = hashlib.sha256()
    for path in sorted(c.files(), key=lambda p: p.rsplit("/", 1)[-1]):
        fs, inner = storage.filesystem(path)
        size = fs.size(inner)
        h.update(f"{path.rsplit('/', 1)[-1]}\0{size}\n".encode())
        with fs.open(inner, "rb") as f:
            h.update(f.read(_ENDS))
            if size > _ENDS:
                f.seek(max(_ENDS, size - _ENDS))
                h.update(f.read(_ENDS))
    return h.hexdigest()[:16]


def check_reuse(cfg: BuildConfig, result: Result) -> None:
    """A finished corpus stage is reused only while its files are the ones it read: a changed
    corpus would otherwise leave every later stage built from the old text, without a word."""
    changed = [lang for lang, was in result.fingerprints.items()
               if lang in cfg.corpus and input_fingerprint(cfg.corpus[lang]) != was]
    if changed:
        raise ValueError(f"the corpus files of {', '.join(changed)} changed since this output's "
                         "corpus stage read them (a file added, removed or of another size): "
                         "its stages were made from the old text. Build into a new --output, "
                         f"or remove {cfg.output}/work to build this one again from the new text")


def _cap(shards: list[dict], cap: int) -> list[dict]:
    """A language-wide ``max_lines``, at shard granularity."""
    if not cap:
        return shards
    kept, n = [], 0
    for s in shards:
        if n >= cap:
            break
        kept.append(s)
        n += s["lines"]
    return kept


def _warn_about(st: StageDir, r: dict, policy: str, lang: str) -> None:
    """Warn (log and ``_DONE.json``) about an empty input file and lines that were not UTF-8."""
    if not r["lines"] and r["invalid_utf8_lines"]:
        st.warn(f"{r['path']}: none of its lines is UTF-8 text ({r['invalid_utf8_lines']} "
                "skipped): is it in another encoding (Latin-1?) or binary? Convert it to "
                "UTF-8 (iconv -f latin1 -t utf-8)")
        return
    if not r["lines"]:
        st.warn(f"{r['path']}: no non-blank lines (empty file?)")
    if r.get("non_text"):
        st.warn(f"{r['path']}: {r['non_text']} JSON text value(s) were not strings (numbers, "
                f"booleans, lists or objects), skipped like nulls; the first is at "
                f"{r['first_non_text']}")
    if r["invalid_utf8_lines"]:
        st.warn(f"{r['path']}: {r['invalid_utf8_lines']} line(s) not valid UTF-8, "
                f"{'skipped' if policy == 'skip' else 'decoded with U+FFFD'} "
                f"(corpus.{lang}.on_bad_bytes = {policy!r})")


def _decode(raw: bytes, path: str, on_bad_bytes: str, stats: dict) -> str | None:
    """One line as text; ``None`` to skip it. Invalid UTF-8 is counted, then skipped, replaced
    with U+FFFD or an error, per ``on_bad_bytes``."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        stats["invalid_utf8_lines"] += 1
        if on_bad_bytes == "error":
            raise ValueError(f"{path}: line {stats['read'] + 1} is not valid UTF-8 ({e}); fix "
                             "the file, or set corpus.<lang>.on_bad_bytes = 'skip' or "
                             "'replace'") from None
        return raw.decode("utf-8", errors="replace") if on_bad_bytes == "replace" else None


def _lines(path: str, fmt: str, text_column: str, stats: dict,
           on_bad_bytes: str = "skip") -> Iterator[str]:
    """Non-blank lines (or Parquet/JSONL texts) of one input file, in order; an error reading
    it (a truncated/corrupt compressed file, storage) names ``path``."""
    try:
        yield from _file_lines(path, fmt, text_column, stats, on_bad_bytes)
    except (PermissionError, FileNotFoundError) as e:
        raise type(e)(f"cannot read {path} ({e}): {storage.access_hint(path)}") from None
    except pa.ArrowException as e:  # not Parquet, cut short, or a column that is not text
        raise ValueError(f"{path}: {str(e).splitlines()[0]}; re-create or re-download it, or "
                         "leave it out of [corpus] paths") from None
    except Exception as e:
        if not inputs.corrupt_stream(e):
            raise
        where = f" after line {stats['read']}" if stats["read"] else ""  # read in 4 MiB chunks
        raise ValueError(f"{path}: truncated or corrupt compressed file{where} "
                         f"({type(e).__name__}: {e}); re-create or re-download it, or leave it "
                         "out of [corpus] paths") from None


def _file_lines(path: str, fmt: str, text_column: str, stats: dict,
                on_bad_bytes: str) -> Iterator[str]:
    """The lines of :func:`_lines`, errors as raised."""
    if fmt == "parquet":
        with open_input(path) as f:
            pf = pq.ParquetFile(f)
            _check_text_column(path, pf.schema_arrow, text_column)
            for rb in pf.iter_batches(columns=[text_column], batch_size=8192):
                for t in rb.column(0).to_pylist():
                    if t and t.strip():
                        yield t.strip()
        return
    column = None
    with open_input(path) as f:
        for raw in iter_lines(f, universal=True):
            line = _decode(raw, path, on_bad_bytes, stats)
            stats["read"] += 1
            if line is None:
                continue
            if fmt == "tsv":
                fields = line.rstrip("\r\n").split("\t")
                if column is None:
                    if text_column not in fields:
                        raise ValueError(f"{path}: no column {text_column!r} in the TSV header "
                                         f"{fields}; set corpus.<lang>.text_column")
                    column = fields.index(text_column)
                    continue
                line = fields[column] if column < len(fields) else ""
            if fmt == "jsonl":
                if not line.strip():
                    continue
                line = _json_text(line, path, stats, text_column)
            line = line.strip()
            if line:
                yield line


def _check_text_column(path: str, schema: pa.Schema, column: str) -> None:
    if column not in schema.names:
        raise ValueError(f"{path}: no column {column!r} (it has {', '.join(schema.names)}); set "
                         "corpus.<lang>.text_column")
    kind = schema.field(column).type
    if not inputs.is_text_type(kind):
        raise ValueError(f"{path}: column {column!r} is {kind}, not text; set "
                         "corpus.<lang>.text_column to a text column")


def _json_text(line: str, path: str, stats: dict, column: str) -> str:
    """The text of one JSONL record ("" for a null; a value that is not a string is counted in
    ``stats`` and skipped like a null); a record that is not an object with ``column`` is an
    error naming the file and line."""
    where = f"{path}:{stats['read']}"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not valid JSON ({e.msg}); fix the line or the file") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: a JSON {type(obj).__name__}, not an object with a "
                         f"{column!r} field")
    if column not in obj:
        raise ValueError(f"{where}: no {column!r} field (it has {', '.join(map(repr, obj))}); "
                         "set corpus.<lang>.text_column")
    text = obj[column]
    if text is not None and not isinstance(text, str):
        stats["non_text"] += 1
        stats["first_non_text"] = stats["first_non_text"] or where
        return ""
    return text or ""


def tsv_column(path: str, fmt: str, text_column: str, lang: str) -> tuple[str, str]:
    """``(format, column)`` for a corpus file: a ``.tsv`` file (e.g. a parallel corpus with an
    ``en<TAB>de`` header) read with ``format = "auto"`` gives its ``lang`` column."""
    if fmt == "auto" and re.search(r"\.tsv(\.[a-z0-9]+)?$", path):
        return "tsv", lang if text_column == "text" else text_column
    return fmt, text_column


def shard_file(path: str, fmt: str, text_column: str, out_prefix: str, max_lines: int,
               shard_lines: int, on_bad_bytes: str = "skip") -> dict:
    """Stream one input file into ``<out_prefix>-NNNNN.parquet`` shards; returns their list.

    A truncated/corrupt compressed file raises ``ValueError`` and a storage error
    ``PermissionError``/``FileNotFoundError``, each naming ``path``."""
    fmt = "tsv" if fmt == "tsv" else input_format(path, fmt, "corpus.<lang>.format")[0]
    stats = {"path": path, "invalid_utf8_lines": 0, "read": 0, "lines": 0, "shards": [],
             "non_text": 0, "first_non_text": ""}
    buf: list[str] = []

    def flush() -> None:
        url = f"{out_prefix}-{len(stats['shards']):05d}.parquet"
        storage.write_parquet(url, pa.table({"text": pa.array(buf, pa.string())}))
        stats["shards"].append({"path": url, "lines": len(buf)})
        buf.clear()

    for line in _lines(path, fmt, text_column, stats, on_bad_bytes):
        buf.append(line)
        stats["lines"] += 1
        if len(buf) == shard_lines:
            flush()
        if max_lines and stats["lines"] >= max_lines:
            break
    if buf:
        flush()
    return stats
