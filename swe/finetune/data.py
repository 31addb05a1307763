"""Labelled data for ``swe finetune``: a Parquet, JSONL or CSV file (local or ``s3://``, plain or
compressed) read into texts and labels, checked, and split into train and dev.

A label is a string or an integer (kept as its string); a list of them makes the task
multi-label. The dev split, without ``--dev``, is a seeded share of the distinct texts (the
pairs' ``sentence_share``), so a text repeated in the file is on one side only.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

__all__ = ["Labelled", "dev_mask", "read_labelled"]

_FORMATS = {".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv"}


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


def _table(path: str) -> pa.Table:
    from swe.inputs import check_regular_file, open_input
    from swe.storage import is_local

    if is_local(path):
        check_regular_file(path)
    fmt = _format(path)
    with open_input(path) as f:
        data = f.read()
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(io.BytesIO(data))
        if fmt == "jsonl":
            import pyarrow.json as pj

            return pj.read_json(io.BytesIO(data))
        import pyarrow.csv as pc

        return pc.read_csv(io.BytesIO(data))
    except (pa.ArrowInvalid, OSError) as e:
        raise ValueError(f"{path} is not readable {fmt} ({e})") from None


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
    missing = [i for i, v in enumerate(values) if v is None or (multi and not v)]
    if missing:
        raise ValueError(f"{path}: {len(missing)} rows have no label in {name!r} (first: row "
                         f"{missing[0]}); drop them or give them one")
    return ([[str(x) for x in v] for v in values] if multi
            else [[str(v)] for v in values]), multi


def read_labelled(path: str, text_column: str, label_column: str) -> Labelled:
    """The file's texts and labels; a wrong column, type, empty text or a single class is a
    ``ValueError`` naming the file and saying what to change."""
    table = _table(path)
    for flag, name in (("--text-column", text_column), ("--label-column", label_column)):
        if name not in table.column_names:
            raise ValueError(f"{path} has no column {name!r} ({flag}); it has "
                             f"{', '.join(table.column_names)}")
    texts = table.column(text_column)
    if not (pa.types.is_string(texts.type) or pa.types.is_large_string(texts.type)
            or pa.types.is_dictionary(texts.type)):
        raise ValueError(f"{path}: {text_column!r} holds {texts.type}, not text")
    texts = texts.cast(pa.string()).to_pylist()
    empty = [i for i, t in enumerate(texts) if t is None or not t.strip()]
    if empty:
        raise ValueError(f"{path}: {len(empty)} rows have an empty or missing text (first: row "
                         f"{empty[0]}); drop them: an empty text has no words to learn from")
    labels, multi = _labels(table.column(label_column), path, label_column)
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
