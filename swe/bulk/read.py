"""Reading inputs for the bulk job: the plan (driver + small tasks), row counts and read tasks.

A *chunk* is ``part_rows`` consecutive rows of one input file, numbered from 0 within the file;
it becomes one output part ``<file index>-<chunk>``. Text/JSONL files are read by one task each
(a compressed stream cannot be split); Parquet files by one task per row group, whose chunks are
numbered after the previous row groups' (known from the footer).
"""

from __future__ import annotations

import json
import lzma
import re
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from swe.bulk.options import EncodeOptions
from swe.inputs import (
    input_format,
    is_text_type,
    iter_lines,
    open_input,
    refuse_binary,
    refuse_parquet,
    refuse_utf16,
)

__all__ = ["check_types", "count_rows", "plan", "read_task"]


@contextmanager
def named(path: str) -> Iterator[None]:
    """Turn a decompression or Parquet error into a one-line ``ValueError`` naming ``path``."""
    try:
        yield
    except (FileNotFoundError, PermissionError, ConnectionError, TimeoutError):
        raise
    except (EOFError, OSError, lzma.LZMAError, zlib.error, pa.ArrowException) as e:
        raise ValueError(f"{path}: cannot read it ({type(e).__name__}: {e}): the file is "
                         "truncated or corrupt; re-create or re-download it") from None
    except Exception as e:
        if "zstd" not in type(e).__name__.lower():
            raise
        raise ValueError(f"{path}: cannot decompress it ({e}): the file is truncated or "
                         "corrupt; re-create or re-download it") from None


def count_rows(path: str, fmt: str) -> int:
    """Rows a file holds: Parquet footer, or lines (JSONL: non-blank lines)."""
    with named(path), open_input(path) as f:
        if fmt == "parquet":
            return pq.ParquetFile(f).metadata.num_rows
        if fmt == "jsonl":
            return sum(1 for line in iter_lines(f) if line.strip())
        n, last = 0, b"\n"
        while chunk := f.read(1 << 22):
            if last == b"\r" and chunk[:1] != b"\n":  # a lone \r at the end of the last chunk
                raise lone_carriage_return(path, n + 1)
            if (lone := re.search(rb"\r(?=[^\n])", chunk)) is not None:  # a final \r: above
                raise lone_carriage_return(path, n + chunk.count(b"\n", 0, lone.start()) + 1)
            n += chunk.count(b"\n")
            last = chunk[-1:]
        return n + (last != b"\n")


def _columns(text_col: str, id_col: str | None, keep: list[str]) -> list[str]:
    return [text_col] + ([id_col] if id_col else []) + list(keep)


def _describe(index: int, path: str, cols: list[str], part_rows: int
              ) -> tuple[list[dict], int, dict[str, str]]:
    """A Parquet file's read descriptors (one per row group), row count and the types of its
    id and kept columns; checks columns."""
    with named(path), open_input(path) as f:
        pf = pq.ParquetFile(f)
        meta, names = pf.metadata, pf.schema_arrow.names
        types = {c: str(pf.schema_arrow.field(c).type) for c in cols[1:] if c in names}
    missing = [c for c in cols if c not in names]
    if missing:
        raise ValueError(f"{path}: no column {missing[0]!r}; columns are {names} "
                         "(use --text-column/--id-column/--keep-columns)")
    out, offset, chunk = [], 0, 0
    for rg in range(meta.num_row_groups):
        n = meta.row_group(rg).num_rows
        out.append({"file_index": index, "path": path, "format": "parquet", "row_group": rg,
                    "row_offset": offset, "first_chunk": chunk, "n_chunks": -(-n // part_rows)})
        offset += n
        chunk += out[-1]["n_chunks"]
    return out, meta.num_rows, types


def lone_carriage_return(path: str, lineno: int) -> ValueError:
    """The error for a text input with a carriage return inside a line: old Mac (CR-only) line
    endings, in the whole file or in part of it. A row is a line ending in ``\\n`` here, while
    a build reads a lone ``\\r`` as a line end too, so such a file is refused, never read two
    ways."""
    return ValueError(f"{path} line {lineno}: a carriage return (\\r) inside the line: the file "
                      "has old Mac (CR-only) line endings, in whole or in part, and such lines "
                      "would be one row here; convert it first: tr '\\r' '\\n' < "
                      f"{path} > converted.txt (or sed 's/\\r$//' first for Windows endings)")


def _peek(path: str, cols: list[str], kind: str) -> None:
    """Before any work: a text file is not Parquet data or UTF-16 and its first line holds no
    lone carriage return (CR-only line endings); a JSONL file's first record has the columns
    asked for."""
    with named(path), open_input(path) as f:
        for lineno, raw in enumerate(iter_lines(f, 1 << 16), 1):
            if raw.strip():
                if lineno == 1:
                    refuse_parquet(path, raw)
                refuse_utf16(path, raw)
                refuse_binary(path, raw)
                with open_input(path) as head:  # a short first line is too little to judge
                    refuse_binary(path, head.read(4096), lines=True)
                if kind == "text" and b"\r" in raw.removesuffix(b"\r"):
                    raise lone_carriage_return(path, lineno)
                if kind == "jsonl":
                    _record(path, lineno, raw.decode("utf-8", errors="replace"), cols)
                return


def plan(files: list[str], fmt: str, cols: list[str], part_rows: int) -> tuple[list[dict], list]:
    """Read descriptors (one per text file or Parquet row group) and refs to each file's row
    count, in file order. Parquet footers, each JSONL file's first record and each text file's
    first line (not UTF-16) are checked now; text files are counted by tasks that run alongside
    the job."""
    import ray

    from swe.raysetup import get

    describe = ray.remote(num_cpus=0.25)(_describe)
    peek = ray.remote(num_cpus=0.25)(_peek)
    count = ray.remote(num_cpus=0.25)(count_rows)
    kinds = [input_format(p, fmt)[0] for p in files]
    described = {i: describe.remote(i, p, cols, part_rows)
                 for i, (p, k) in enumerate(zip(files, kinds, strict=True)) if k == "parquet"}
    get([peek.remote(p, cols, k) for p, k in zip(files, kinds, strict=True) if k != "parquet"])
    tasks: list[dict] = []
    counts: list = []
    typed: dict[str, tuple[str, str]] = {}  # column -> (type, the first file with it)
    for i, (path, kind) in enumerate(zip(files, kinds, strict=True)):
        if kind == "parquet":
            rg_tasks, n, types = get(described[i])
            check_types(typed, types, path)
            tasks.extend(rg_tasks)
            counts.append(ray.put(n))
        else:
            tasks.append({"file_index": i, "path": path, "format": kind, "row_group": 0,
                          "row_offset": 0, "first_chunk": 0, "n_chunks": 0})
            counts.append(count.remote(path, kind))
    return tasks, counts


def check_types(typed: dict[str, tuple[str, str]], types: dict[str, str], where: str) -> None:
    """Every id or kept column has one type across the inputs (the output is one table):
    ``typed`` holds each column's first type and where it was seen; a null type fits any."""
    for col, kind in types.items():
        if kind == "null":
            continue
        first, seen = typed.setdefault(col, (kind, where))
        if kind != first:
            raise ValueError(f"{where}: column {col!r} is {kind} but {seen} has it as {first}; "
                             "the output holds one type per column: convert one of them (or "
                             "encode them separately)")


def _record(path: str, lineno: int, line: str, cols: list[str]) -> tuple[list, bool]:
    """The row's values (a text that is not a string becomes ``None``, encoded like a null) and
    whether its text was such a value."""
    try:
        obj = json.loads(line.removeprefix("\ufeff") if lineno == 1 else line)  # a UTF-8 BOM
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
    except RecursionError:
        raise ValueError(f"{path}:{lineno}: not valid JSON here (nested too deeply)") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path}:{lineno}: not a JSON object")
    for c in cols:
        if c not in obj:
            raise ValueError(f"{path}:{lineno}: no {c!r} field (use --text-column/--id-column/"
                             "--keep-columns)")
    text = obj[cols[0]]
    non_text = text is not None and not isinstance(text, str)
    return [None if non_text else text, *(obj[c] for c in cols[1:])], non_text


def _text_rows(path: str, fmt: str, cols: list[str]) -> Iterator[tuple[list, bool, int]]:
    """``(values, invalid_utf8, line)`` per row of a text or JSONL file, in order; ``line`` is
    the row's line number when its JSON text value is not a string (else 0)."""
    with open_input(path) as f:
        for lineno, raw in enumerate(iter_lines(f), 1):
            if fmt == "jsonl" and not raw.strip():
                continue
            try:
                line, bad = raw.decode("utf-8"), False
            except UnicodeDecodeError:
                line, bad = raw.decode("utf-8", errors="replace"), True
            if fmt == "text":
                if b"\r" in raw and b"\r" in raw.removesuffix(b"\r"):
                    raise lone_carriage_return(path, lineno)
                yield [line.removesuffix("\r")], bad, 0
            else:
                values, non_text = _record(path, lineno, line, cols)
                values, lone = _without_lone_surrogates(values)
                yield values, bad or lone, lineno if non_text else 0


def _without_lone_surrogates(values: list) -> tuple[list, bool]:
    """The values with each lone surrogate of a string (valid JSON: ``"\\ud800"``, never valid
    UTF-8) made U+FFFD, as invalid UTF-8 is; whether there was one."""
    out, lone = [], False
    for v in values:
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                v, lone = v.encode("utf-16", "surrogatepass").decode("utf-16", "replace"), True
        out.append(v)
    return out, lone


def _text_chunks(desc: dict, cols: list[str], part_rows: int, skip: set
                 ) -> Iterator[tuple[int, pa.Table, dict]]:
    """``(chunk, table, counts)`` of a text/JSONL file (counts: rows with invalid UTF-8, JSON
    text values that are not strings and the line of the first); skipped chunks are parsed (to
    keep row numbers) but not built."""
    path, fmt = desc["path"], desc["format"]
    rows: list = []
    chunk, counts = 0, _no_counts()
    for values, invalid, non_text in _text_rows(path, fmt, cols):
        rows.append(values)
        counts["invalid_utf8"] += invalid
        if non_text:
            counts["non_text"] += 1
            counts["first_non_text"] = counts["first_non_text"] or f"{path}:{non_text}"
        if len(rows) == part_rows:
            yield chunk, (None if chunk in skip else _table(rows, cols, path)), counts
            rows, chunk, counts = [], chunk + 1, _no_counts()
    if rows:
        yield chunk, (None if chunk in skip else _table(rows, cols, path)), counts


def _no_counts() -> dict:
    return {"invalid_utf8": 0, "non_text": 0, "first_non_text": ""}


def _table(rows: list, cols: list[str], path: str) -> pa.Table:
    columns = list(zip(*rows, strict=True))
    out = {}
    for i, (c, v) in enumerate(zip(cols, columns, strict=True)):
        try:
            out[c] = pa.array(v, pa.string() if i == 0 else None)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            kinds = sorted({type(x).__name__ for x in v if x is not None})
            raise ValueError(f"{path}: column {c!r} mixes {' and '.join(kinds)} values; give "
                             "every row the same type") from None
        except OverflowError:
            raise ValueError(f"{path}: column {c!r} holds an integer beyond 64 bits; store "
                             "such ids as strings") from None
    return pa.table(out)


def _parquet_chunks(desc: dict, cols: list[str], part_rows: int, skip: set
                    ) -> Iterator[tuple[int, pa.Table, dict]]:
    """``(chunk, table, counts)`` of one Parquet row group, re-cut into ``part_rows`` rows."""
    path = desc["path"]
    chunk = desc["first_chunk"]
    pending: list[pa.RecordBatch] = []
    have = 0
    with open_input(path) as f:
        pf = pq.ParquetFile(f)
        for rb in pf.iter_batches(batch_size=part_rows, row_groups=[desc["row_group"]],
                                  columns=cols):
            if not is_text_type(rb.schema.field(cols[0]).type):
                raise ValueError(f"{path}: column {cols[0]!r} is {rb.schema.field(cols[0]).type},"
                                 " not text (use --text-column)")
            pending.append(_decoded(rb))
            have += rb.num_rows
            while have >= part_rows:
                table = pa.Table.from_batches(pending)
                yield chunk, (None if chunk in skip else table.slice(0, part_rows)), _no_counts()
                rest = table.slice(part_rows)
                pending, have, chunk = rest.to_batches(), rest.num_rows, chunk + 1
    if have:
        yield chunk, (None if chunk in skip else pa.Table.from_batches(pending)), _no_counts()


def _decoded(rb: pa.RecordBatch) -> pa.RecordBatch:
    """``rb`` with its dictionary-encoded columns (a pandas categorical) as plain values."""
    if not any(pa.types.is_dictionary(f.type) for f in rb.schema):
        return rb
    columns = [c.dictionary_decode() if pa.types.is_dictionary(c.type) else c
               for c in rb.columns]
    return pa.RecordBatch.from_arrays(columns, names=rb.schema.names)


def read_task(batch: pa.Table, opts: EncodeOptions, done: dict) -> Iterator[pa.Table]:
    """Ray Data UDF: one read descriptor → one row per chunk still to encode, holding the
    chunk's texts (and ids, kept columns) as lists, its part name and first row number."""
    desc = batch.slice(0, 1).to_pylist()[0]
    cols = _columns(opts.text_column, opts.id_column, list(opts.keep_columns))
    part_rows = opts.part_rows
    skip = set(done.get(desc["file_index"], ()))
    reader = _parquet_chunks if desc["format"] == "parquet" else _text_chunks
    row = desc["row_offset"]
    typed: dict[str, tuple[str, str]] = {}
    with named(desc["path"]):
        for chunk, table, counts in reader(desc, cols, part_rows, skip):
            n = table.num_rows if table is not None else part_rows
            if table is not None:
                check_types(typed, {c: str(table.schema.field(c).type) for c in cols[1:]},
                            f"{desc['path']} (from row {row + 1})")
                yield _chunk_row(desc, chunk, row, table, counts, cols)
            row += n


def _chunk_row(desc: dict, chunk: int, row: int, table: pa.Table, counts: dict,
               cols: list[str]) -> pa.Table:
    texts = table.column(cols[0]).combine_chunks()
    n = len(texts)
    lens = pa.compute.utf8_length(pa.compute.utf8_trim_whitespace(texts))
    empty = int(pa.compute.sum(pa.compute.equal(lens, 0)).as_py() or 0)
    out = {"part": [f"{desc['file_index']}-{chunk}"], "file_index": [desc["file_index"]],
           "file": [desc["path"]], "row": [row], "rows": [n],
           "nulls": [texts.null_count - counts["non_text"]], "empty": [empty],
           **{k: [v] for k, v in counts.items()}}
    for c in cols:
        values = table.column(c).combine_chunks()
        out["c:" + c] = pa.ListArray.from_arrays(pa.array(np.array([0, n], np.int32)), values)
    return pa.table(out)
