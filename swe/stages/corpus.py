"""Stages 1–2: corpus files → Parquet shards of lines → Parquet shards of sentences.

A compressed file cannot be read in parallel, so one task streams each input file once into
shards of ``shard_lines`` lines; every later pass reads those shards in parallel. CC-100's layout
(one paragraph per line, blank lines between documents, one huge ``.xz`` per language) is exactly
this: blank lines are dropped, paragraphs are split into sentences in the next stage. Lines that
are not valid UTF-8 are counted and skipped, decoded with U+FFFD, or stop the build
(``corpus.<lang>.on_bad_bytes``); a truncated or corrupt compressed file stops it, naming the file.
"""

from __future__ import annotations

import gzip
import io
import json
import lzma
import re
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from swe import storage
from swe.bulk import input_format, iter_lines, open_input
from swe.text import split_sentences

__all__ = ["load_tokenizer", "read_pairs", "sentence_shard", "shard_file", "tsv_column"]


def write_parquet(url: str, table: pa.Table) -> None:
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=4096)
    storage.write_bytes(url, buf.getvalue())


def read_parquet(url: str, columns: list[str] | None = None) -> pa.Table:
    fs, path = storage.filesystem(url)
    with fs.open(path, "rb") as f:
        return pq.read_table(f, columns=columns)


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


# What a truncated or corrupt compressed stream raises while it is read.
_CORRUPT = (EOFError, lzma.LZMAError, zlib.error, gzip.BadGzipFile)


def _lines(path: str, fmt: str, text_column: str, stats: dict, on_bad_bytes: str = "skip"):
    """Non-blank lines (or Parquet/JSONL texts) of one input file, in order; an error reading
    it (a truncated/corrupt compressed file, storage) names ``path``."""
    try:
        yield from _file_lines(path, fmt, text_column, stats, on_bad_bytes)
    except _CORRUPT as e:
        raise ValueError(f"{path}: truncated or corrupt compressed file after line "
                         f"{stats['read']} ({type(e).__name__}: {e}); re-create or re-download "
                         "it, or leave it out of [corpus] paths") from None
    except (PermissionError, FileNotFoundError) as e:
        raise type(e)(f"cannot read {path} ({e}): {storage.access_hint(path)}") from None


def _file_lines(path: str, fmt: str, text_column: str, stats: dict, on_bad_bytes: str):
    """The lines of :func:`_lines`, errors as raised."""
    if fmt == "parquet":
        with open_input(path) as f:
            for rb in pq.ParquetFile(f).iter_batches(columns=[text_column], batch_size=8192):
                for t in rb.column(0).to_pylist():
                    if t and t.strip():
                        yield t.strip()
        return
    column = None
    with open_input(path) as f:
        for raw in iter_lines(f):
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
                line = json.loads(line).get(text_column) or ""
            line = line.strip()
            if line:
                yield line


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
    fmt = "tsv" if fmt == "tsv" else input_format(path, fmt)[0]
    stats = {"path": path, "invalid_utf8_lines": 0, "read": 0, "lines": 0, "shards": []}
    buf: list[str] = []

    def flush() -> None:
        url = f"{out_prefix}-{len(stats['shards']):05d}.parquet"
        write_parquet(url, pa.table({"text": pa.array(buf, pa.string())}))
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


def load_tokenizer(teacher_dir: str):
    """The teacher's fast tokenizer (``tokenizers``), padding and truncation off."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(storage.join(teacher_dir, "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return tok


def sentence_shard(src: str, dst: str, shard_id: int, teacher_dir: str, split: bool,
                   min_tokens: int, max_tokens: int) -> dict:
    """Split a line shard into sentences, count teacher tokens, keep the length window.

    Output columns: ``sid`` (``shard_id << 32 | row``: unique and in corpus order), ``text``,
    ``ntok`` (teacher tokens without special tokens).
    """
    lines = read_parquet(src).column("text").to_pylist()
    sents: list[str] = []
    for line in lines:
        sents.extend(split_sentences(line) if split else [line])
    tok = load_tokenizer(teacher_dir)
    ntok = np.fromiter((len(e.ids) for e in tok.encode_batch(sents, add_special_tokens=False)),
                       dtype=np.int32, count=len(sents))
    keep = (ntok >= min_tokens) & (ntok <= max_tokens)
    idx = np.flatnonzero(keep)
    sid = (np.int64(shard_id) << 32) + np.arange(len(idx), dtype=np.int64)
    write_parquet(dst, pa.table({"sid": sid, "text": pa.array([sents[i] for i in idx]),
                                  "ntok": ntok[idx]}))
    return {"path": dst, "sentences": len(idx), "dropped_by_length": int((~keep).sum()),
            "lines": len(lines)}


def read_pairs(path: str, src: str, tgt: str) -> tuple[list[str], list[str], int]:
    """Translation pairs from a TSV file (plain or compressed) whose header names ``src`` and
    ``tgt`` columns; returns ``(sources, targets, skipped)`` — rows with an empty side or
    invalid UTF-8 are skipped and counted."""
    xs: list[str] = []
    ys: list[str] = []
    skipped = 0
    cols = None
    with open_input(path) as f:
        for raw in iter_lines(f):
            try:
                fields = raw.decode("utf-8").rstrip("\r\n").split("\t")
            except UnicodeDecodeError:
                skipped += 1
                continue
            if cols is None:
                if src not in fields or tgt not in fields:
                    raise ValueError(f"{path}: the header {fields} must name columns {src!r} "
                                     f"and {tgt!r} (e.g. 'en<TAB>de')")
                cols = fields.index(src), fields.index(tgt)
                continue
            x = fields[cols[0]].strip() if cols[0] < len(fields) else ""
            y = fields[cols[1]].strip() if cols[1] < len(fields) else ""
            if x and y:
                xs.append(x)
                ys.append(y)
            else:
                skipped += 1
    return xs, ys, skipped
