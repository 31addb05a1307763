"""The encoder actor: one chunk in, one Parquet part and its receipt written, one receipt row out.

Parts go straight from the actor to storage under their deterministic names (a retried chunk
rewrites the same name; each write is atomic); nothing but the receipt returns to the driver.
"""

from __future__ import annotations

import hashlib
import io
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from swe import storage
from swe.bulk.options import EncodeOptions
from swe.matrix import DTYPES

__all__ = ["DTYPES", "Encoder", "predictions", "quantize"]


def quantize(vectors: np.ndarray, dtype: str, dim: int | None) -> tuple[np.ndarray, float]:
    """Truncate to ``dim`` (re-normalised) and cast; int8 is ``round(v / scale)`` with the
    returned ``scale`` (``v ≈ int8 * scale``; unit vectors: scale = 1/127)."""
    if dim is not None and dim < vectors.shape[1]:
        vectors = vectors[:, :dim]
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.where(norms > 0, norms, 1)
    if dtype == "int8":
        scale = 1 / 127
        return np.clip(np.rint(vectors / scale), -127, 127).astype(np.int8), scale
    return vectors.astype(dtype), 1.0


def _rows(vectors: np.ndarray) -> pa.FixedSizeListArray:
    """A ``[n, d]`` matrix as ``n`` fixed-size list rows."""
    return pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1])


def predictions(classifier: Any, texts: list) -> dict[str, pa.Array]:
    """Each text's label (multi-label: its labels at >= 0.5) and its score per label."""
    scores = classifier.predict_proba(texts)
    labels = classifier.labels
    if classifier.multi_label:
        label = pa.array([[labels[j] for j in np.flatnonzero(r >= 0.5)] for r in scores],
                         pa.list_(pa.string()))
    else:
        label = pa.array([labels[j] for j in scores.argmax(axis=1)], pa.string())
    return {"label": label, "scores": _rows(scores.astype(np.float32))}


def _node_id() -> str:
    """The Ray node this actor runs on (recorded in each receipt), or "" outside Ray."""
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""


class Encoder:
    """Ray Data actor: loads the model once; ``__call__`` takes one chunk row (batch_size=1)."""

    def __init__(self, model: str, run_dir: str, opts: EncodeOptions) -> None:
        from swe.classifier import StaticClassifier
        from swe.model import StaticModel

        self.classifier = StaticClassifier.load(model) if opts.predict else None
        self.model = self.classifier.model if self.classifier else StaticModel.load(model)
        self.run_dir = run_dir
        self.opts = opts
        self.node = _node_id()

    def _table(self, chunk: pa.Table) -> pa.Table:
        """The output rows of one chunk: ``[id | file, row], kept columns..., embedding``."""
        def values(name: str) -> pa.Array:
            return chunk.column("c:" + name).combine_chunks().flatten()

        texts = values(self.opts.text_column).to_pylist()
        vectors, _ = quantize(self.model.encode(texts), self.opts.dtype, self.opts.dim)
        n = len(texts)
        cols: dict = {}
        if self.opts.id_column:
            cols[self.opts.id_column] = values(self.opts.id_column)
        else:
            first = chunk.column("row")[0].as_py()
            cols["file"] = pa.array([chunk.column("file")[0].as_py()] * n, pa.string())
            cols["row"] = pa.array(np.arange(first, first + n, dtype=np.int64))
        for c in self.opts.keep_columns:
            if c not in cols:
                cols[c] = values(c)
        cols["embedding"] = _rows(vectors)
        if self.opts.tokens:
            cols.update(self._tokens(texts))
        if self.classifier:
            cols.update(predictions(self.classifier, texts))
        return pa.table(cols)

    def _tokens(self, texts: list) -> dict[str, pa.Array]:
        """Each text's word units and their vectors (first ``dim`` dimensions, not normalised)."""
        per_text = self.model.encode_tokens(texts)
        dim = self.opts.dim or self.model.dim
        offsets = np.cumsum([0, *(len(t.units) for t in per_text)], dtype=np.int32)
        flat = np.concatenate([t.vectors[:, :dim] for t in per_text]) if per_text else \
            np.zeros((0, dim), np.float32)
        vectors = _rows(flat.astype(self.opts.dtype))
        return {"tokens": pa.array([t.units for t in per_text], pa.list_(pa.string())),
                "token_vectors": pa.ListArray.from_arrays(pa.array(offsets), vectors)}

    def __call__(self, chunk: pa.Table) -> pa.Table:
        """Encode a chunk, write its part then its receipt; return the receipt as a row."""
        part = chunk.column("part")[0].as_py()
        table = self._table(chunk)
        buf = io.BytesIO()
        pq.write_table(table, buf, row_group_size=16384)
        data = buf.getvalue()
        storage.write_bytes_atomic(storage.join(self.run_dir, f"{part}.parquet"), data)
        receipt = {"part": part, "file_index": chunk.column("file_index")[0].as_py(),
                   "rows": table.num_rows, "bytes": len(data),
                   "sha256": hashlib.sha256(data).hexdigest(),
                   "nulls": chunk.column("nulls")[0].as_py(),
                   "empty": chunk.column("empty")[0].as_py(),
                   "invalid_utf8": chunk.column("invalid_utf8")[0].as_py(),
                   "non_text": chunk.column("non_text")[0].as_py(),
                   "types": {f.name: str(f.type) for f in table.schema if f.name != "embedding"},
                   "file": chunk.column("file")[0].as_py(),
                   "first_non_text": chunk.column("first_non_text")[0].as_py(),
                   "node": self.node}
        storage.write_bytes_atomic(storage.join(self.run_dir, "_receipts", f"{part}.json"),
                                   json.dumps(receipt).encode())
        return pa.table({k: [v] for k, v in receipt.items()})
