"""Labelled data for ``swe finetune``: a Parquet, JSONL or CSV file (local or ``s3://``, plain or
compressed) read into texts and labels, checked, and split into train and dev.

A label is a string or an integer (kept as its string); a list of them makes the task
multi-label; a missing, empty or blank label is refused. A float or bool column is refused (a
float is a regression target, not a class). A CSV has no types: its text and label columns are
read as the text written, so the label codes ``007`` and ``7`` stay two classes ``"007"`` and
``"7"`` (type inference would make them the integers 7 and 7), and ``true``/``false`` or dates
are classes like any other words. Only a CSV label column whose every label reads as a number,
one at least with a fraction or exponent (``0.5``, ``1.0``, ``1e3``, ``nan``), is refused, as
the same column in Parquet or JSONL (a double) is. A CSV or JSONL file must be UTF-8: UTF-16
and other encodings (Latin-1, cp1252) are refused, naming the encoding and how to convert it.
The dev split, without ``--dev``, is a seeded share of the distinct texts (the
pairs' ``sentence_share``), so a text repeated in the file is on one side only.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from swe.inputs import convert_command

__all__ = ["Labelled", "dev_mask", "read_labelled"]

_FORMATS = {".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv"}
#: A number as CSV type inference reads one; an integer among them is a class code.
_NUMBER = re.compile(r"[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|nan|inf|infinity)", re.IGNORECASE)
_INTEGER = re.compile(r"[+-]?\d+")


@dataclass(frozen=True)
class Labelled:
    """A file's texts, each one's labels (one per text unless multi-label) and the label set."""

    texts: list[str]
    labels: list[list[str]]
    classes: list[str]  # sorted
    multi_label: bool


def _format(path: str) -> str:
    stem = path
    for comp in (".gz", ".xz", ".zst", ".bz2"):
        stem = stem.removesuffix(comp)
    for ext, fmt in _FORMATS.items():
        if stem.endswith(ext):
            return fmt
    raise ValueError(f"{path}: name the format by the extension (.parquet, .jsonl or .csv, "
                     "optionally .gz/.xz/.zst/.bz2)")


def _table(path: str, text_column: str, label_column: str) -> pa.Table:
    from swe.inputs import check_regular_file, corrupt_file, corrupt_stream, open_input
    from swe.storage import is_local

    if is_local(path):
        check_regular_file(path)
    fmt = _format(path)
    try:
        with open_input(path) as f:
            data = f.read()
    except Exception as e:
        if not corrupt_stream(e):
            raise
        raise corrupt_file(path, e) from None
    if fmt != "parquet":
        _check_utf8(path, data)
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(io.BytesIO(data))
        if fmt == "jsonl":
            import pyarrow.json as pj

            return pj.read_json(io.BytesIO(data))
        import pyarrow.csv as pc

        as_text = {text_column: pa.string(), label_column: pa.string()}  # no type inference
        return pc.read_csv(io.BytesIO(data), convert_options=pc.ConvertOptions(
            column_types=as_text))
    except (pa.ArrowInvalid, OSError) as e:
        raise ValueError(f"{path} is not readable {fmt} ({e})") from None


def _check_utf8(path: str, data: bytes) -> None:
    """Refuse a CSV or JSONL file that is not UTF-8, naming the encoding where it can be told
    (UTF-16 by its NUL bytes, Latin-1 or cp1252 by bytes above 127 that are not UTF-8) and the
    command that converts it; the bytes are checked in place (no copy) unless one is wrong."""
    from swe.inputs import refuse_utf16

    try:
        refuse_utf16(path, data[:1 << 16])
    except ValueError:
        source = "UTF-32" if b"\0\0\0" in data[:1 << 16] else "UTF-16"  # ASCII: 3 NULs
        if not data.startswith((b"\xff\xfe", b"\xfe\xff")):  # no byte-order mark: iconv
            source += "BE" if data[:1] == b"\0" else "LE"  # would take big-endian
        raise ValueError(f"{path} is {source} text, not UTF-8: convert it (e.g. "
                         f"{convert_command(path, source)}) and pass that") from None
    buffer = pa.py_buffer(data)
    offsets = pa.py_buffer(np.array([0, len(data)], np.int64).tobytes())
    try:
        pa.Array.from_buffers(pa.large_string(), 1, [None, offsets, buffer]).validate(full=True)
        return
    except pa.ArrowInvalid:
        pass
    try:
        data.decode("utf-8")
        return  # (not reached: Arrow and Python agree on UTF-8)
    except UnicodeDecodeError as e:
        start = e.start
    line = data.count(b"\n", 0, start) + 1
    where = f"line {line}, byte {data[start]:#04x} at offset {start}"
    if b"\0" in data[:1 << 16]:
        raise ValueError(f"{path} is not UTF-8 text ({where}) and holds NUL bytes: is it a "
                         "binary file? swe finetune reads Parquet, or UTF-8 JSONL or CSV")
    try:  # cp1252 is Latin-1 with letters in 0x80-0x9f, 5 of which it leaves undefined
        data.decode("cp1252")
        source = "CP1252"
    except UnicodeDecodeError:
        source = "LATIN1"
    raise ValueError(f"{path} is not UTF-8 text ({where}); it looks like Latin-1 or cp1252 "
                     f"(Windows-1252): convert it (e.g. {convert_command(path, source)}) and pass "
                     "that")


def _labels(column: pa.ChunkedArray, path: str, name: str) -> tuple[list[list[str]], bool]:
    kind = column.type
    multi = pa.types.is_list(kind) or pa.types.is_large_list(kind)
    inner = kind.value_type if multi else kind
    if pa.types.is_dictionary(inner):
        inner = inner.value_type
    if not (pa.types.is_string(inner) or pa.types.is_large_string(inner)
            or pa.types.is_integer(inner)):
        raise ValueError(f"{path}: labels in {name!r} are {kind}; a label must be a string or "
                         "an integer (or a list of them, for multi-label)")
    values = column.to_pylist()
    missing = [i for i, v in enumerate(values) if _missing(v) or (multi and (
        not v or any(_missing(x) for x in v)))]
    if missing:
        raise ValueError(f"{path}: {len(missing)} rows have no label in {name!r} (first: row "
                         f"{missing[0]}; a missing, empty or blank label); drop them or give "
                         "them one")
    return ([[str(x) for x in v] for v in values] if multi
            else [[str(v)] for v in values]), multi


def _missing(label: object) -> bool:
    return label is None or (isinstance(label, str) and not label.strip())


def _refuse_decimals(labels: list[list[str]], path: str, name: str) -> None:
    """Refuse a CSV label column that reads as decimal numbers (what type inference would make a
    double, refused in Parquet and JSONL): every label a number, one at least not an integer."""
    distinct = {x.strip() for row in labels for x in row}
    if all(_NUMBER.fullmatch(x) for x in distinct):
        decimal = sorted(x for x in distinct if not _INTEGER.fullmatch(x))
        if decimal:
            raise ValueError(f"{path}: labels in {name!r} read as decimal numbers (e.g. "
                             f"{decimal[0]!r}): a regression target, not classes; a label must "
                             "be a string or an integer")


def read_labelled(path: str, text_column: str, label_column: str) -> Labelled:
    """The file's texts and labels; a wrong column, type, empty text or a single class is a
    ``ValueError`` naming the file and saying what to change."""
    table = _table(path, text_column, label_column)
    for flag, name in (("--text-column", text_column), ("--label-column", label_column)):
        if name not in table.column_names:
            raise ValueError(f"{path} has no column {name!r} ({flag}); it has "
                             f"{', '.join(table.column_names)}")
    texts = table.column(text_column)
    if not (pa.types.is_string(texts.type) or pa.types.is_large_string(texts.type)
            or pa.types.is_dictionary(texts.type)):
        raise ValueError(f"{path}: {text_column!r} holds {texts.type}, not text")
    texts = texts.cast(pa.string()).to_pylist()
    if not texts:
        raise ValueError(f"{path} has no rows (a header at most); give it labelled rows")
    empty = [i for i, t in enumerate(texts) if t is None or not t.strip()]
    if empty:
        raise ValueError(f"{path}: {len(empty)} rows have an empty or missing text (first: row "
                         f"{empty[0]}); drop them: an empty text has no words to learn from")
    labels, multi = _labels(table.column(label_column), path, label_column)
    if _format(path) == "csv":
        _refuse_decimals(labels, path, label_column)
    classes = sorted({x for row in labels for x in row})
    if len(classes) < 2:
        raise ValueError(f"{path}: every row has the label {classes[0]!r}; a classifier needs "
                         "at least two classes")
    return Labelled(texts, labels, classes, multi)


def dev_mask(texts: list[str], share: float, seed: int) -> np.ndarray:
    """True for the texts in the seeded dev share: the pairs' rule (``sentence_share``, BLAKE2b
    of seed and normalised text), so the same text is always on the same side."""
    from swe.build.pairs.text import sentence_share

    return sentence_share(pa.array(texts, pa.string()), seed) < share
