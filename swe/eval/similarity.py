"""Semantic textual similarity (STS): Spearman's ρ between cosine similarity and gold scores."""

from __future__ import annotations

import copy
import csv
import logging
import os
from pathlib import Path

import numpy as np

from swe.eval.encoders import Encoder
from swe.eval.metrics import l2_normalise, spearman

log = logging.getLogger("swe.eval")

__all__ = ["read_sts", "sts", "sts_dir"]


def read_sts(path: str | os.PathLike) -> tuple[list[str], list[str], np.ndarray]:
    """An STS file (TSV or CSV) with ``sentence1``, ``sentence2`` and ``score`` columns."""
    path = Path(path)
    if path.exists() and not path.is_file():  # a pipe or a device would block or never end
        raise ValueError(f"{path} is not a regular file: an STS set is a TSV or CSV file")
    if not path.is_file():
        raise FileNotFoundError(f"STS file not found: {path}")
    delim = "," if path.suffix.lower() == ".csv" else "\t"
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter=delim,
                                quoting=csv.QUOTE_MINIMAL if delim == "," else csv.QUOTE_NONE)
        missing = {"sentence1", "sentence2", "score"} - set(reader.fieldnames or [])
        if missing:
            raise ValueError(f"{path}: missing column(s) {sorted(missing)}; the header is "
                             f"{reader.fieldnames}")
        a, b, s = [], [], []
        for line, row in enumerate(reader, start=2):
            try:
                s.append(float(row["score"]))
            except (TypeError, ValueError):
                raise ValueError(f"{path}:{line}: score {row['score']!r} is not a number") from None
            if not np.isfinite(s[-1]):
                raise ValueError(f"{path}:{line}: score {row['score']!r} is not a finite number")
            a.append(row["sentence1"] or "")
            b.append(row["sentence2"] or "")
    if len(s) < 2:
        raise ValueError(f"{path}: fewer than 2 rows")
    return a, b, np.asarray(s)


def sts(encoder: Encoder, path: str | os.PathLike) -> float:
    """Spearman × 100 between cosine similarity and the gold scores. An encoder with a ``fit``
    method (GEM) is first fitted on both columns' sentences, as its authors evaluate it."""
    a, b, gold = read_sts(path)
    if hasattr(encoder, "fit"):  # on a copy: later tasks must not reuse these directions
        encoder = copy.copy(encoder).fit(a + b)
    ea, eb = l2_normalise(encoder.encode(a)), l2_normalise(encoder.encode(b))
    cosines = (ea * eb).sum(1)
    zero = int(((ea == 0).all(1) | (eb == 0).all(1)).sum())
    if zero:
        log.warning("%s: %d of %d pairs have a text with no known word (a zero vector): their "
                    "cosine is undefined and scored as 0", path, zero, len(cosines))
    if float(np.ptp(cosines)) <= 1e-6:  # equal but for float32 rounding: ranks of noise
        raise ValueError(f"{path}: spearman is undefined: every predicted similarity is "
                         f"{float(cosines[0]):.6f} (up to rounding)")
    return 100 * spearman(cosines, gold)


def sts_dir(encoder: Encoder, path: str | os.PathLike) -> dict[str, float]:
    """``{"spearman": …}`` for one STS file, or for a directory the mean over its ``.tsv`` and
    ``.csv`` files plus each file's score under its stem."""
    if "://" in os.fspath(path):
        raise ValueError("STS sets are read from local files only; copy it here and name the "
                         "copy")
    path = Path(path)
    if not path.is_dir():
        return {"spearman": sts(encoder, path)}
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in (".tsv", ".csv"))
    if not files:
        raise FileNotFoundError(f"no .tsv or .csv STS files in {path}")
    scores = {p.stem: sts(encoder, p) for p in files}
    return {"spearman": sum(scores.values()) / len(scores), **scores}
