"""The bulk job's options, each defined once: its field here carries the default, the
``swe encode`` flag, the help and the choices. The CLI's flags are generated from these fields
(:func:`add_arguments`), and the options cross into Ray Data's read tasks and encoder actors as
this dataclass itself."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field, fields

from swe.matrix import DTYPES

__all__ = ["DTYPES", "EncodeOptions", "add_arguments"]

# Fields added after runs were named, with their neutral value (left out of the name).
_ADDED = {"tokens": False, "predict": False}


@dataclass(frozen=True)
class EncodeOptions:
    """Everything that shapes the output: a change starts a new run (the run's name hashes
    these fields by name, so renaming one starts a new run for every earlier output)."""

    text_column: str = field(default="text", metadata={
        "help": "text column/field (Parquet, JSONL)"})
    id_column: str | None = field(default=None, metadata={
        "help": "id column/field to carry over; default: file + row"})
    keep_columns: tuple[str, ...] = field(default=(), metadata={
        "nargs": "+", "help": "columns to carry over"})
    dtype: str = field(default="float32", metadata={
        "choices": DTYPES, "help": "int8: round(v * 127), scale 1/127 in the manifest"})
    dim: int | None = field(default=None, metadata={
        "type": int, "help": "keep the first DIM dimensions (re-normalised)"})
    fmt: str = field(default="auto", metadata={
        "flag": "--format", "choices": ("auto", "parquet", "jsonl", "text"),
        "help": "input format"})
    part_rows: int = field(default=65536, metadata={"type": int, "help": "rows per output part"})
    tokens: bool = field(default=False, metadata={
        "action": "store_true", "help": "also write each row's word units and their vectors "
        "(columns tokens and token_vectors: what the embedding averages; float32 or float16)"})
    predict: bool = field(default=False, metadata={
        "action": "store_true", "help": "the model is a classifier (swe finetune): also write "
        "each row's label (labels, for multi-label) and its scores, one per label"})

    def hashed(self) -> dict:
        """The fields that name a run: every field, less those added later while they keep
        their default (so an earlier run keeps its name)."""
        return {k: v for k, v in asdict(self).items() if k not in _ADDED or v != _ADDED[k]}

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> EncodeOptions:
        """The options from the parsed flags of :func:`add_arguments`."""
        values = {f.name: getattr(args, f.name) for f in fields(cls)}
        return cls(**{**values, "keep_columns": tuple(values["keep_columns"] or ())})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per :class:`EncodeOptions` field (``--text-column`` for ``text_column``)."""
    for f in fields(EncodeOptions):
        meta = dict(f.metadata)
        flag = meta.pop("flag", "--" + f.name.replace("_", "-"))
        default = list(f.default) if isinstance(f.default, tuple) else f.default
        parser.add_argument(flag, dest=f.name, default=default, **meta)
